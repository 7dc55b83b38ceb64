"""Drive `interlock serve` with the Python `mcp` 2.x client (a real MCP peer no one here wrote),
in front of `interlock-rail-mock`, through every reason code an agent can meet.

Usage: e2e.py [--transport stdio|http] --interlock BIN --mock MOCK --dir DIR --pins PINS_JSON

Every scene runs over either transport: stdio (the proxy as the client's child), or streamable
HTTP (`interlock serve --listen` with an agents file and a bearer token).

PINS_JSON is `interlock pin --json` of the mock. Each scene writes its own mandate (as JSON,
which is YAML), seed, ledger and journal under DIR and starts its own proxy:

- main: listing (granted, pinned and offered only); a benign refund (every gate's OK code) and
  its replay;
  REFUND_EXCEEDS_REFUNDABLE, AMOUNT_ABOVE_CEILING, AMOUNT_BELOW_MINIMUM,
  REFUND_EXCEEDS_ORDER_PAID, REFERENT_UNRESOLVABLE_BLOCKED; ARGUMENTS_INVALID (float, string,
  negative); TOOL_NOT_GRANTED; TOOL_UNPINNED, TOOL_DRIFTED, MANIFEST_UNAVAILABLE; RAIL_REJECTED;
  8 concurrent identical refunds -> one entity; unicode distinct reasons; FEE_BUDGET_EXHAUSTED.
- held: settlements held (their balance read outlives the call bound), AWAITING_APPROVAL,
  `interlock approve` (APPLIED, then IDEMPOTENT_REPLAY) and `interlock reject`
  (PREVIOUSLY_BLOCKED); UPSTREAM_UNAVAILABLE (a slow read) then the same read forwarded;
  SETTLEMENT_EXCEEDS_BALANCE.
- tight: WINDOW_AMOUNT_EXCEEDED, REFUNDS_PER_PAYMENT_EXCEEDED, WINDOW_CALLS_EXCEEDED.
- attempts: every attempt answered 5xx, nothing applied: OUTCOME_UNKNOWN, IN_PROGRESS, then
  after 8 attempts each proven absent, ATTEMPT_LIMIT_REACHED.
- restart: the proxy SIGKILLed while its refund hangs on the rail (applied, unanswered);
  restarted on the same ledger, boot recovery settles it; the retry is an IDEMPOTENT_REPLAY of
  the one entity; `interlock audit verify` passes.
- rugpull: an upstream no one here wrote (`rugpull_server.py`, the Python SDK's server): a
  granted write it offers without `readOnlyHint` is neither listed nor forwarded
  (TOOL_NOT_READ_ONLY, and the upstream never sees it); it rewrites a pinned tool's
  description while served and sends `notifications/tools/list_changed`: the agent gets the
  notification, the tool drops out of the listing and a call is TOOL_DRIFTED.
- reconciled: a 504 after the rail applied (OUTCOME_UNKNOWN), settled APPLIED by the
  reconciler; the agent's retry is an IDEMPOTENT_REPLAY whose text names the entity, the
  amount and that nothing was sent again, never the rail's 504.
- operator: a 504 after apply, then six failing list calls: QUARANTINED (about two minutes of
  backing-off passes, run beside the other scenes); `interlock resolve --applied`; the retry is
  an IDEMPOTENT_REPLAY in words.
- terms: the rail commits a refund one paisa short of what was asked and answers with it
  (the mock's `short_apply`): RAIL_TERMS_DIFFER, quarantined with both figures, never sent
  again; `interlock resolve --applied` with that refund; the replay says what moved.
- approvals: held settlements put to the user through the client's elicitation callback (the
  form names the agent, tool, amount in digits and words, mandate and SIK, and requires an
  explicit choice): approve -> APPLIED; decline -> PREVIOUSLY_BLOCKED; no answer within
  --approval-wait-ms -> still HELD, then `interlock approve` releases it; the approval is single
  use (the replay asks nobody, a second `interlock approve` is refused) and recorded as given in
  the client by the agent. The held scene's client declares no elicitation: today's answers.
- http (--transport http only): two agents with their own tokens and mandates on one server and
  one ledger: no token / an unknown token -> 401 with `WWW-Authenticate: Bearer`; a session
  used with the other agent's token -> 404; each agent judged by its own ceiling; the same
  refund asked by both paid once; a body past 256 KiB -> 413; a 17th open session of one agent ->
  429 (the other agent unaffected), room again once one is closed.
- Every replay's text is checked in `expect`: its sentence, the entity, "nothing was sent
  again", and no stale error words.
- rogue (AGENT_MISMATCH), untrusted (SERVER_UNTRUSTED), usd (CURRENCY_NOT_ALLOWED), unpinned
  (PROVENANCE_MISSING),
  expiring (MANDATE_EXPIRED once the mandate lapses while serving).

Codes an agent cannot meet through this proxy and this mock, and why:
- MERCHANT_MISMATCH: the proxy takes the merchant from the mandate, never from the agent.
- MANDATE_NOT_YET_VALID: `serve` refuses to start with such a mandate (checked here: exit 1).
- PAYMENT_NOT_CAPTURED: every payment the mock seeds is captured.
- MODEL_SILENT, MODEL_HELD, MODEL_BLOCKED: the proxy runs no advisory model, so G5 is not in
  its ladder at all.

Prints one JSON line `e2e: {...}` (the codes seen, the journals to check) for the Rust side,
then `e2e: ok`. Exits non-zero with a message naming the failed check.
"""

import argparse
import asyncio
import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import faulthandler
import hashlib
import socket
import time

from mcp import ClientSession, StdioServerParameters
from mcp_types import ElicitResult
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
import httpx2

AGENT = "agent_support_bot"
MERCHANT = "acc_DEMO000001"
# A call that should answer gets this long (seconds).
CALL_TIMEOUT = 30
# The whole run (seconds): the slowest scene, eight attempts each proven absent, takes ~25 s.
SCRIPT_TIMEOUT = 240

SEEN = set()


class Failed(Exception):
    """A check that did not hold."""


def check(condition, what):
    if not condition:
        raise Failed(what)


def text_of(result):
    check(len(result.content) >= 1, f"a content block, got {result!r}")
    check(result.content[0].type == "text", f"a text block, got {result.content[0]!r}")
    return result.content[0].text


def block(result):
    structured = result.structured_content
    check(isinstance(structured, dict), f"structuredContent, got {result!r}")
    info = structured.get("interlock")
    check(isinstance(info, dict), f"structuredContent.interlock, got {structured!r}")
    for key in ("outcome", "reason_code", "message", "sik", "gates"):
        check(key in info, f"interlock.{key} in {info}")
    SEEN.add(info["reason_code"])
    for gate in info["gates"]:
        SEEN.add(gate["reason_code"])
    return info


def expect(result, code, outcome=None, words=()):
    info = block(result)
    check(info["reason_code"] == code, f"expected {code}, got {info}")
    if outcome is not None:
        check(info["outcome"] == outcome, f"expected {outcome} for {code}, got {info}")
    if info["outcome"] != "APPLIED":
        check(result.is_error is True, f"a refusal is isError: {info}")
        check(text_of(result) == info["message"], f"the message comes first: {info}")
    elif info.get("idempotent_replay"):
        # A replay says what happened in words, never the rail's stale error.
        said = text_of(result)
        check(result.is_error is not True, f"a replay is a success: {info}")
        check(said == info["message"], f"a replay's text is its message: {said!r} vs {info}")
        for word in (info["rail_entity_id"], "nothing was sent again"):
            check(word in said, f"{word!r} in the replay's text {said!r}")
        for word in ("failed", "ERROR", "Timeout", "ambiguous"):
            check(word not in said, f"no stale {word!r} in the replay's text {said!r}")
    for word in words:
        check(word in info["message"], f"{word!r} not in {info['message']!r}")
    return info


class Rig:
    """Paths and pins shared by every scene."""

    def __init__(self, interlock, mock, directory, pins, transport):
        self.transport = transport
        self.interlock = interlock
        self.mock = mock
        self.dir = directory
        self.pins = pins
        self.seed = os.path.join(directory, "seed.json")
        with open(self.seed, "w") as f:
            json.dump(SEED, f)

    def mandate(self, name, edit=None, provenance=True):
        grants = {
            "fetch_payment": {
                "reversibility": "reversible",
                "value": {"max_amount_minor": 0, "min_amount_minor": 0, "currencies": ["INR"]},
            },
            "create_refund": {
                "reversibility": "irreversible",
                "value": {"max_amount_minor": 500000, "min_amount_minor": 100, "currencies": ["INR"]},
            },
            "create_instant_settlement": {
                "reversibility": "irreversible",
                "on_unresolvable": "hold",
                "value": {"max_amount_minor": 100000, "min_amount_minor": 200, "currencies": ["INR"]},
            },
        }
        mandate = {
            "v": 1,
            "mandate_id": f"mnd_{name}",
            "merchant_id": MERCHANT,
            "agent_id": AGENT,
            "issued_at": 1700000000000,
            "expires_at": 2000000000000,
            "purpose": "Refund duplicate customer charges",
            "scope": {"grants": grants},
            "limits": {
                "windows": [
                    {"window_ms": 86400000, "max_calls": 40, "max_amount_minor": 2000000, "currency": "INR"}
                ],
                "fee_budgets": {"INR": {"window_ms": 86400000, "max_fee_minor": 20000}},
            },
            "idempotency": {
                "create_refund": {"key_fields": ["payment_id"], "window_ms": None},
                "create_instant_settlement": {"key_fields": ["description"], "window_ms": 86400000},
            },
        }
        if provenance:
            mandate["provenance"] = {
                "server_id": self.pins["server_id"],
                "manifest_sha256": self.pins["manifest_sha256"],
                "pinned_manifests": {
                    tool: {"sha256": self.pins["tools"][tool], "trust_tier": "pinned"} for tool in grants
                },
            }
        if edit is not None:
            edit(mandate)
        path = os.path.join(self.dir, f"{name}.yaml")
        with open(path, "w") as f:
            json.dump(mandate, f, indent=1)
        return path

    def mock_args(self, name, faults="none"):
        journal = os.path.join(self.dir, f"{name}.rail.db")
        return journal, [self.mock, "--journal", journal, "--seed", self.seed, "--log-level", "error", "--faults", faults]

    def serve(self, name, mandate, faults="none", flags=(), agent=AGENT):
        journal, mock = self.mock_args(name, faults)
        db = os.path.join(self.dir, f"{name}.ledger.db")
        return journal, db, self.serve_args(name, mandate, db, agent, flags, mock)

    def serve_args(self, name, mandate, db, agent, flags, upstream):
        """`interlock serve` for one agent: on stdio, or on HTTP with an agents file naming the
        one agent, its mandate and the hash of the run's token."""
        if self.transport == "stdio":
            return ["serve", "--mandate", mandate, "--db", db, "--agent", agent, *flags, "--", *upstream]
        agents = os.path.join(self.dir, f"{name}.agents.yaml")
        with open(agents, "w") as f:
            json.dump({"agents": [{"id": agent, "mandate": mandate, "token_sha256": token_sha256(TOKEN)}]}, f)
        listen = f"127.0.0.1:{free_port()}"
        return ["serve", "--listen", listen, "--agents", agents, "--db", db, *flags, "--", *upstream]

    def inspect(self, journal):
        out = subprocess.run(
            [self.mock, "inspect", "--journal", journal, "--log-level", "error"],
            capture_output=True, text=True, check=True,
        )
        return json.loads(out.stdout)

    def stamped(self, journal, kind, subject=None):
        return [
            e for e in self.inspect(journal)[kind]
            if isinstance(e.get("notes"), dict) and "interlock_sik" in e["notes"]
            and (subject is None or e.get("payment_id") == subject)
        ]

    def cli(self, *args):
        env = dict(os.environ, RUST_LOG="error")
        return subprocess.run([self.interlock, *args], capture_output=True, text=True, env=env)


SEED = {
    "currency": "INR",
    # Small, so that a settlement within the grant's ceiling can exceed it.
    "balance": 60000,
    "payments": [
        {"id": "pay_1002", "amount": 189900, "order_id": "order_1002"},
        {"id": "pay_1003", "amount": 250000, "order_id": "order_1003"},
        {"id": "pay_1005", "amount": 1200000},
        # Paid only in part on its order: a refund above what was paid is refused.
        {"id": "pay_2001", "amount": 100000, "order_id": "order_2001"},
    ] + [{"id": f"pay_300{n}", "amount": 100000} for n in range(1, 8)],
    "orders": [
        {"id": "order_1002", "amount": 189900, "amount_paid": 189900},
        {"id": "order_1003", "amount": 250000, "amount_paid": 250000},
        {"id": "order_2001", "amount": 100000, "amount_paid": 50000},
    ],
    "refunds": [
        {"id": "rfnd_SEED0000000001", "payment_id": "pay_1003", "amount": 50000, "receipt": "support_ticket_88"},
    ],
}


def env():
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR")}
    keep["RUST_LOG"] = "error"
    return keep


async def call(session, tool, args):
    return await asyncio.wait_for(session.call_tool(tool, args), CALL_TIMEOUT)


async def refund(session, payment_id, amount, **extra):
    return await call(session, "create_refund", {"payment_id": payment_id, "amount": amount, **extra})


async def settle(session, amount, description):
    return await call(session, "create_instant_settlement", {"amount": amount, "description": description})


class Session:
    """`interlock serve ARGS` with a Python client session on it: over the child's stdio, or,
    when ARGS say `--listen`, over streamable HTTP with the run's bearer token."""

    def __init__(self, rig, args, command=None, message_handler=None, token=None, elicitation_callback=None):
        self.command = command or rig.interlock
        self.args = args
        self.params = StdioServerParameters(command=self.command, args=args, env=env())
        self.message_handler = message_handler
        self.elicitation_callback = elicitation_callback
        self.listen = args[args.index("--listen") + 1] if "--listen" in args else None
        self.token = token or TOKEN
        self.log = os.path.join(rig.dir, f"serve-{os.getpid()}-{id(self)}.stderr")
        self.proc = None

    async def __aenter__(self):
        if self.listen is None:
            self._transport = stdio_client(self.params)
            read, write = await self._transport.__aenter__()
        else:
            self.proc = await start_http_server(self.command, self.args, self.listen, self.log)
            self._transport = http_client(self.listen, self.token)
            read, write = await self._transport.__aenter__()
        self._session = ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT,
                                      message_handler=self.message_handler,
                                      elicitation_callback=self.elicitation_callback)
        session = await self._session.__aenter__()
        init = await session.initialize()
        check(init.server_info.name == "interlock", f"server {init.server_info}")
        return session

    async def __aexit__(self, *exc):
        try:
            await self._session.__aexit__(*exc)
            await self._transport.__aexit__(*exc)
        finally:
            if self.proc is not None and self.proc.returncode is None:
                self.proc.terminate()
                await asyncio.wait_for(self.proc.wait(), 10)


# The bearer token of every HTTP scene (each scene's server has its own agents file).
TOKEN = "ilk_e2e_" + os.urandom(16).hex()


def token_sha256(token):
    return hashlib.sha256(token.encode()).hexdigest()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_http_server(command, args, listen, log):
    """Starts `interlock serve --listen` and waits until it accepts connections (or says why
    it could not start)."""
    host, port = listen.rsplit(":", 1)
    with open(log, "wb") as err:
        proc = await asyncio.create_subprocess_exec(command, *args, env=env(), stdin=subprocess.DEVNULL,
                                                    stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.monotonic() + 15
    while True:
        if proc.returncode is not None:
            with open(log) as f:
                raise Failed(f"interlock serve --listen {listen} exited {proc.returncode}: {f.read()[-2000:]}")
        try:
            _, writer = await asyncio.open_connection(host, int(port))
            writer.close()
            return proc
        except OSError:
            check(time.monotonic() < deadline, f"interlock serve never listened on {listen}")
            await asyncio.sleep(0.05)


def http_client(listen, token):
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return streamable_http_client(f"http://{listen}/mcp", http_client=create_mcp_http_client(headers=headers))


async def main_scene(rig, summary):
    def edit(m):
        grants = m["scope"]["grants"]
        read = {"reversibility": "reversible",
                "value": {"max_amount_minor": 0, "min_amount_minor": 0, "currencies": ["INR"]}}
        # Granted but never pinned; pinned to a wrong hash; pinned but not offered by the rail.
        grants["fetch_order"] = copy.deepcopy(read)
        grants["fetch_refund"] = copy.deepcopy(read)
        grants["fetch_ghost"] = copy.deepcopy(read)
        pins = m["provenance"]["pinned_manifests"]
        pins["fetch_refund"] = {"sha256": "0" * 64, "trust_tier": "pinned"}
        pins["fetch_ghost"] = {"sha256": "1" * 64, "trust_tier": "pinned"}
        m["limits"]["fee_budgets"]["INR"]["max_fee_minor"] = 100

    journal, db, args = rig.serve("main", rig.mandate("main", edit), flags=["--reconcile-every-ms", "200"])
    summary["main_journal"] = journal
    async with Session(rig, args) as s:
        tools = await s.list_tools()
        names = sorted(t.name for t in tools.tools)
        check(names == ["create_instant_settlement", "create_refund", "fetch_payment"], f"listed {names}")

        # A benign refund: every gate's OK code, the rail's own answer, stamped.
        first = await refund(s, "pay_1002", 10000)
        info = expect(first, "APPLIED", "APPLIED")
        gates = {(g["gate"], g["reason_code"]) for g in info["gates"]}
        for gate in (("G1", "SCOPE_OK"), ("G2", "VALUE_OK"), ("G3", "LIMITS_OK"), ("G6", "PROVENANCE_OK")):
            check(gate in gates, f"{gate} in {gates}")
        rail = json.loads(text_of(first))
        check(rail["id"] == info["rail_entity_id"] and rail["notes"]["interlock_sik"] == info["sik"],
              f"the rail's stamped refund: {rail}")
        replayed = await refund(s, "pay_1002", 10000)
        again = expect(replayed, "IDEMPOTENT_REPLAY", "APPLIED", ["10000 INR", "pay_1002"])
        check(again.get("idempotent_replay") is True and again["rail_entity_id"] == info["rail_entity_id"],
              f"the same entity: {again}")
        # After the sentence, the rail's own answer to the call that applied it.
        check(len(replayed.content) == 2 and json.loads(replayed.content[1].text) == rail,
              f"the rail's first answer follows the sentence: {replayed.content!r}")
        summary["benign_entity"] = info["rail_entity_id"]

        # G2, with the numbers an agent needs.
        expect(await refund(s, "pay_1003", 250000), "REFUND_EXCEEDS_REFUNDABLE", "REFUSED",
               ["250000", "200000"])
        expect(await refund(s, "pay_3001", 600000), "AMOUNT_ABOVE_CEILING", "REFUSED", ["600000", "500000"])
        expect(await refund(s, "pay_3001", 50), "AMOUNT_BELOW_MINIMUM", "REFUSED", ["100"])
        expect(await refund(s, "pay_2001", 60000), "REFUND_EXCEEDS_ORDER_PAID", "REFUSED",
               ["60000", "50000", "order_2001"])
        expect(await refund(s, "pay_9999", 1000), "REFERENT_UNRESOLVABLE_BLOCKED", "REFUSED")

        # Arguments refused before any gate; nothing reaches the rail.
        for amount, word in ((500.0, "float"), ("500", "string"), (-5, "amount")):
            info = expect(await refund(s, "pay_1002", amount), "ARGUMENTS_INVALID", "REFUSED", [word])
            check(info["sik"] is None, f"no intent for refused arguments: {info}")

        # G1 and G6 on reads: ungranted, unpinned, drifted, not offered.
        expect(await call(s, "fetch_balance", {}), "TOOL_NOT_GRANTED", "REFUSED", ["fetch_balance"])
        expect(await call(s, "fetch_order", {"order_id": "order_1002"}), "TOOL_UNPINNED", "REFUSED")
        expect(await call(s, "fetch_refund", {"refund_id": "rfnd_SEED0000000001"}), "TOOL_DRIFTED", "REFUSED")
        expect(await call(s, "fetch_ghost", {}), "MANIFEST_UNAVAILABLE", "REFUSED")

        # An argument Interlock does not judge reaches the rail, which refuses it.
        expect(await refund(s, "pay_3002", 1000, speed={"nested": {"deep": [1, 2, 3]}}),
               "RAIL_REJECTED", "REJECTED", ["BAD_REQUEST_ERROR"])

        # 8 identical refunds at once: one entity; the rest replay or are in progress.
        results = await asyncio.gather(*(refund(s, "pay_1005", 25000) for _ in range(8)))
        entities = set()
        for r in results:
            i = block(r)
            check(i["outcome"] in ("APPLIED", "IN_PROGRESS"), f"concurrent {i}")
            if i["outcome"] == "APPLIED":
                entities.add(i["rail_entity_id"])
        check(len(entities) == 1, f"one entity among the concurrent refunds: {entities}")
        after = expect(await refund(s, "pay_1005", 25000), "IDEMPOTENT_REPLAY", "APPLIED")
        check(after["rail_entity_id"] in entities, f"the same entity {after}")
        summary["concurrent_entity"] = after["rail_entity_id"]

        # Unicode distinct reasons: each its own intent, kept as text.
        a = expect(await refund(s, "pay_3003", 1000, interlock_distinct_reason="レビュー後の返金 ✓"), "APPLIED")
        b = expect(await refund(s, "pay_3003", 1000, interlock_distinct_reason="второй возврат"), "APPLIED")
        check(a["sik"] != b["sik"] and a["rail_entity_id"] != b["rail_entity_id"], f"two intents: {a} {b}")
        expect(await refund(s, "pay_3003", 1000, interlock_distinct_reason=" レビュー後の返金 ✓ "),
               "IDEMPOTENT_REPLAY", "APPLIED")

        # Last, as it stops every later call: an optimum refund's fee spends the budget of 100.
        expect(await refund(s, "pay_3004", 100000, speed="optimum"), "APPLIED", "APPLIED")
        expect(await refund(s, "pay_3005", 1000), "FEE_BUDGET_EXHAUSTED", "REFUSED", ["100"])


async def held_scene(rig, summary):
    mandate = rig.mandate("held")
    # Reads 1-3 outlive the call bound: two settlements' balance reads, then the agent's read.
    # (`slow` numbers each class on its own; this scene's rail gets no money call of its own.)
    journal, db, args = rig.serve(
        "held", mandate, faults="slow=2500@1-3", flags=["--call-timeout-ms", "1000"],
    )
    summary["held_journal"] = journal
    async with Session(rig, args) as s:
        held = expect(await settle(s, 10000, "payout one"), "REFERENT_UNRESOLVABLE_HELD", "HELD",
                      ["held for a human"])
        other = expect(await settle(s, 20000, "payout two"), "REFERENT_UNRESOLVABLE_HELD", "HELD")
        slow = expect(await call(s, "fetch_payment", {"payment_id": "pay_1002"}),
                      "UPSTREAM_UNAVAILABLE", "UNAVAILABLE", ["retry"])
        check(slow.get("retryable") is True and slow["sik"] is None, f"retryable, no intent: {slow}")
        read = await call(s, "fetch_payment", {"payment_id": "pay_1002"})
        check(read.is_error is not True, f"the same read again is forwarded: {text_of(read)}")
        check(read.structured_content is None or "interlock" not in read.structured_content,
              "a forwarded read is the rail's answer, unchanged")
        check(json.loads(text_of(read))["id"] == "pay_1002", f"the rail's payment: {text_of(read)}")

        expect(await settle(s, 10000, "payout one"), "AWAITING_APPROVAL")
        _, mock = rig.mock_args("held")
        approved = rig.cli("approve", held["sik"], "--mandate", mandate, "--db", db, "--by", "ops@example.com",
                           "--why", "balance checked by hand", "--json", "--", *mock)
        check(approved.returncode == 0, f"approve: {approved.stdout} {approved.stderr}")
        check(json.loads(approved.stdout)["outcome"] == "APPLIED", f"approved: {approved.stdout}")
        replay = expect(await settle(s, 10000, "payout one"), "IDEMPOTENT_REPLAY", "APPLIED",
                        ["10000 INR", "balance"])
        rejected = rig.cli("reject", other["sik"], "--mandate", mandate, "--db", db, "--by", "ops@example.com",
                           "--why", "not needed")
        check(rejected.returncode == 0, f"reject: {rejected.stderr}")
        expect(await settle(s, 20000, "payout two"), "PREVIOUSLY_BLOCKED", words=["not needed"])
        expect(await settle(s, 80000, "too big"), "SETTLEMENT_EXCEEDS_BALANCE", "REFUSED",
               ["80000 exceeds the"])
        summary["settlement_entity"] = replay["rail_entity_id"]


async def approvals_scene(rig, summary):
    """Held settlements put to the user through the client's elicitation form: approve carries
    it out, decline refuses it for good, no answer in time leaves it held for the CLI; the
    approval is single use and recorded as given in the client by the agent's identity."""
    mandate = rig.mandate("approvals")
    # Reads 2, 4 and 5 (the three settlements' balance reads) outlive the call bound: three
    # settlements held. `slow` numbers every class alike, so read 1 is a plain read and money
    # call 1 (the approved settlement) is not slowed.
    journal, db, args = rig.serve(
        "approvals", mandate, faults="slow=2500@2,slow=2500@4-5",
        flags=["--call-timeout-ms", "1000", "--approval-wait-ms", "2000"],
    )
    summary["approvals_journal"] = journal
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        schema = params.requested_schema
        check(schema["required"] == ["decision"] and "default" not in schema["properties"]["decision"],
              f"an explicit choice, no default: {schema}")
        if "100.00 INR" in params.message:
            return ElicitResult(action="accept", content={"decision": "approve", "note": "checked the bank"})
        if "200.00 INR" in params.message:
            return ElicitResult(action="decline")
        await asyncio.sleep(4)  # longer than --approval-wait-ms: no answer in time
        return ElicitResult(action="accept", content={"decision": "approve"})

    async with Session(rig, args, elicitation_callback=on_elicit) as s:
        read = await call(s, "fetch_payment", {"payment_id": "pay_1002"})
        check(read.is_error is not True, f"a read asks nobody: {text_of(read)}")
        approved = expect(await settle(s, 10000, "payout one"), "APPLIED", "APPLIED")
        form = asked[0]
        for word in ("agent_support_bot", "create_instant_settlement",
                     "100.00 INR (one hundred INR and 00/100; 10000 minor units)",
                     "mnd_approvals", approved["sik"], "held for a human"):
            check(word in form, f"{word!r} in the form: {form!r}")
        declined = expect(await settle(s, 20000, "payout two"), "PREVIOUSLY_BLOCKED", "REFUSED",
                          ["declined in the MCP client"])
        waited = expect(await settle(s, 30000, "payout three"), "REFERENT_UNRESOLVABLE_HELD", "HELD")
        check(len(asked) == 3, f"one form per held call: {len(asked)}")

        # The approval was single use: the same action again is a replay, nobody is asked, and
        # the CLI cannot approve it a second time.
        expect(await settle(s, 10000, "payout one"), "IDEMPOTENT_REPLAY", "APPLIED")
        check(len(asked) == 3, f"a replay asks nobody: {len(asked)}")
        _, mock = rig.mock_args("approvals")
        again = rig.cli("approve", approved["sik"], "--mandate", mandate, "--db", db, "--by", "ops@example.com",
                        "--why", "twice", "--json", "--", *mock)
        check(again.returncode != 0, f"a second approval is refused: {again.stdout} {again.stderr}")
        shown = rig.cli("ledger", "--db", db, "--json", "show", approved["sik"])
        check(shown.returncode == 0 and f"{AGENT} via the MCP client" in shown.stdout,
              f"the approval is recorded as the agent's, in the client: {shown.stdout} {shown.stderr}")

        # Not answered in time: still held, and the CLI still works.
        released = rig.cli("approve", waited["sik"], "--mandate", mandate, "--db", db, "--by", "ops@example.com",
                           "--why", "the human answered late", "--json", "--", *mock)
        check(released.returncode == 0 and json.loads(released.stdout)["outcome"] == "APPLIED",
              f"approve after the wait: {released.stdout} {released.stderr}")
        summary["approvals_entities"] = [approved["rail_entity_id"]]
        del declined


async def tight_scene(rig, summary):
    def edit(m):
        m["limits"]["windows"] = [
            {"window_ms": 86400000, "max_calls": 2, "max_amount_minor": 30000, "currency": "INR"}]
        m["scope"]["grants"]["create_refund"]["max_refunds_per_payment"] = 1

    journal, _, args = rig.serve("tight", rig.mandate("tight", edit))
    summary["tight_journal"] = journal
    async with Session(rig, args) as s:
        expect(await refund(s, "pay_1002", 25000), "APPLIED", "APPLIED")
        expect(await refund(s, "pay_1003", 10000), "WINDOW_AMOUNT_EXCEEDED", "REFUSED", ["35000", "30000"])
        expect(await refund(s, "pay_1002", 1000, interlock_distinct_reason="second"),
               "REFUNDS_PER_PAYMENT_EXCEEDED", "REFUSED", ["pay_1002"])
        expect(await refund(s, "pay_3001", 1000), "APPLIED", "APPLIED")
        expect(await refund(s, "pay_3002", 1000), "WINDOW_CALLS_EXCEEDED", "REFUSED", ["allows 2"])


async def attempts_scene(rig, summary):
    journal, _, args = rig.serve(
        "attempts", rig.mandate("attempts"), faults="http_5xx_not_applied@1-8",
        flags=["--reconcile-every-ms", "200"],
    )
    summary["attempts_journal"] = journal
    async with Session(rig, args) as s:
        expect(await refund(s, "pay_3006", 1000), "OUTCOME_UNKNOWN", "UNKNOWN")
        expect(await refund(s, "pay_3006", 1000), "IN_PROGRESS")
        deadline = time.monotonic() + 90
        unknowns = 1
        while True:
            info = block(await refund(s, "pay_3006", 1000))
            if info["reason_code"] == "ATTEMPT_LIMIT_REACHED":
                check("8 attempts" in info["message"], f"the limit named: {info}")
                break
            check(info["reason_code"] in ("OUTCOME_UNKNOWN", "IN_PROGRESS"), f"attempts {info}")
            unknowns += info["reason_code"] == "OUTCOME_UNKNOWN"
            check(time.monotonic() < deadline, f"no attempt limit after {unknowns} unknown outcomes: {info}")
            await asyncio.sleep(0.3)
        check(unknowns == 8, f"8 attempts, each unknown then proven absent: {unknowns}")


async def restart_scene(rig, summary):
    mandate = rig.mandate("restart")
    flags = ["--call-timeout-ms", "3000", "--lease-ttl-ms", "8000", "--reconcile-every-ms", "200"]
    journal, db, args = rig.serve("restart", mandate, faults="timeout_after_apply@1", flags=flags)
    summary["restart_journal"] = journal
    pidfile = os.path.join(rig.dir, "restart.pid")
    # A shell that records its pid, then becomes the proxy: the pid to SIGKILL.
    wrapper = ["-c", 'echo $$ > "$0"; exec "$@"', pidfile, rig.interlock, *args]
    killed = False
    try:
        async with Session(rig, wrapper, command="sh") as s:
            pending = asyncio.create_task(refund(s, "pay_3007", 7000))
            deadline = time.monotonic() + 20
            while not rig.stamped(journal, "refunds", "pay_3007"):
                check(time.monotonic() < deadline, "the rail never applied the refund")
                await asyncio.sleep(0.05)
            with open(pidfile) as f:
                os.kill(int(f.read().strip()), signal.SIGKILL)
            killed = True
            try:
                answer = await asyncio.wait_for(pending, 10)
                check(False, f"the killed proxy answered: {answer!r}")
            except (Exception, asyncio.CancelledError):
                pass
    except Failed:
        raise
    except BaseException:  # the session ends with its server killed
        if not killed:
            raise
    check(killed, "the proxy was killed mid-call")
    # Restarted on the same ledger: boot recovery waits out the lease, then reconciles.
    _, _, args = rig.serve("restart", mandate, flags=flags)
    async with Session(rig, args) as s:
        info = expect(await refund(s, "pay_3007", 7000), "IDEMPOTENT_REPLAY", "APPLIED")
        summary["restart_entity"] = info["rail_entity_id"]
    verify = rig.cli("audit", "verify", "--json", "--db", db)
    check(verify.returncode == 0 and json.loads(verify.stdout)["ok"] is True, f"audit verify: {verify.stdout}")


async def reconciled_scene(rig, summary):
    """A 504 after the rail applied: the reconciler settles it APPLIED; the agent asking again is
    told, in words, that it was applied and nothing was sent again (not the rail's 504)."""
    journal, _, args = rig.serve(
        "reconciled", rig.mandate("reconciled"), faults="http_5xx_applied@1",
        flags=["--reconcile-every-ms", "200"],
    )
    summary["reconciled_journal"] = journal
    async with Session(rig, args) as s:
        first = expect(await refund(s, "pay_3001", 4200), "OUTCOME_UNKNOWN", "UNKNOWN",
                       ["ambiguous", "will not send it again"])
        deadline = time.monotonic() + 30
        while True:
            result = await refund(s, "pay_3001", 4200)
            info = block(result)
            if info["reason_code"] == "IDEMPOTENT_REPLAY":
                break
            check(info["reason_code"] == "IN_PROGRESS", f"waiting for the reconciler: {info}")
            check(time.monotonic() < deadline, f"not reconciled in 30 s: {info}")
            await asyncio.sleep(0.3)
        info = expect(result, "IDEMPOTENT_REPLAY", "APPLIED", ["4200 INR", "pay_3001"])
        check(info["sik"] == first["sik"], f"the same intent: {info}")
        check(len(result.content) == 1, f"no rail answer to replay, only the sentence: {result.content!r}")
        stamped = rig.stamped(journal, "refunds", "pay_3001")
        check([e["id"] for e in stamped] == [info["rail_entity_id"]], f"one refund on the rail: {stamped}")


async def operator_scene(rig, summary):
    """A 504 after the rail applied, then lists that fail six times: quarantined for a human, the
    agent told so plainly; an operator settles it as applied; the agent's retry is a replay."""
    mandate = rig.mandate("operator")
    # List calls 1-6 fail (the mock's partition spares the payment read the gates need): every
    # reconcile pass up to the 6th is inconclusive, and the 6th quarantines.
    journal, db, args = rig.serve(
        "operator", mandate, faults="http_5xx_applied@1,partition@1-6",
        flags=["--reconcile-every-ms", "200"],
    )
    async with Session(rig, args) as s:
        first = expect(await refund(s, "pay_3002", 4300), "OUTCOME_UNKNOWN", "UNKNOWN")
        deadline = time.monotonic() + 180
        while True:
            result = await refund(s, "pay_3002", 4300)
            info = block(result)
            if info["reason_code"] == "QUARANTINED":
                break
            check(info["reason_code"] == "IN_PROGRESS", f"waiting for quarantine: {info}")
            check(time.monotonic() < deadline, f"not quarantined in 180 s: {info}")
            await asyncio.sleep(2)
        expect(result, "QUARANTINED", "QUARANTINED", ["quarantined", "operator", "do not retry"])
        stamped = rig.stamped(journal, "refunds", "pay_3002")
        check(len(stamped) == 1, f"one refund on the rail: {stamped}")
        resolved = rig.cli("resolve", first["sik"], "--mandate", mandate, "--db", db,
                           "--by", "ops@example.com", "--applied", stamped[0]["id"])
        check(resolved.returncode == 0, f"resolve: {resolved.stdout} {resolved.stderr}")
        info = expect(await refund(s, "pay_3002", 4300), "IDEMPOTENT_REPLAY", "APPLIED",
                      ["4300 INR", stamped[0]["id"]])
        summary["operator_entity"] = info["rail_entity_id"]


async def terms_scene(rig, summary):
    """The rail moves other money than authorised (a refund one paisa short) and answers with
    it: not a success. The agent is told plainly with both figures; the intent is quarantined
    with the entity recorded and never sent again; an operator accepts it knowingly."""
    mandate = rig.mandate("terms")
    journal, db, args = rig.serve("terms", mandate, faults="short_apply@1")
    async with Session(rig, args) as s:
        first = expect(await refund(s, "pay_3006", 4400), "RAIL_TERMS_DIFFER", "QUARANTINED",
                       ["not as authorised", "amount 4399", "4400 INR was authorised", "do not retry"])
        again = expect(await refund(s, "pay_3006", 4400), "RAIL_TERMS_DIFFER", "QUARANTINED")
        check(again["sik"] == first["sik"], f"the same intent: {again}")
        stamped = rig.stamped(journal, "refunds", "pay_3006")
        check([e["amount"] for e in stamped] == [4399], f"one short refund on the rail: {stamped}")
        refused = rig.cli("resolve", first["sik"], "--mandate", mandate, "--db", db,
                          "--by", "ops@example.com", "--not-applied")
        check(refused.returncode != 0 and "money moved" in refused.stderr,
              f"moved money cannot be resolved as not applied: {refused.stdout} {refused.stderr}")
        resolved = rig.cli("resolve", first["sik"], "--mandate", mandate, "--db", db,
                           "--by", "ops@example.com", "--applied", stamped[0]["id"])
        check(resolved.returncode == 0, f"resolve: {resolved.stdout} {resolved.stderr}")
        info = expect(await refund(s, "pay_3006", 4400), "IDEMPOTENT_REPLAY", "APPLIED",
                      ["4399 INR (4400 INR authorised)", stamped[0]["id"]])
        check(len(rig.stamped(journal, "refunds", "pay_3006")) == 1, "nothing was sent again")
        summary["terms_entity"] = info["rail_entity_id"]


async def guard_scenes(rig):
    # The agent is not the mandate's: refused before anything is read.
    _, _, args = rig.serve("rogue", rig.mandate("rogue"), agent="agent_rogue")
    async with Session(rig, args) as s:
        expect(await call(s, "fetch_payment", {"payment_id": "pay_1002"}), "AGENT_MISMATCH", "REFUSED",
               ["agent_rogue", AGENT])
        expect(await refund(s, "pay_1002", 1000), "AGENT_MISMATCH", "REFUSED")

    # Pins taken from another server: nothing is listed, nothing is called.
    def foreign(m):
        m["provenance"]["server_id"] = "evil-mcp@6.6.6"

    _, _, args = rig.serve("untrusted", rig.mandate("untrusted", foreign))
    async with Session(rig, args) as s:
        check((await s.list_tools()).tools == [], "an untrusted server's tools are not listed")
        expect(await call(s, "fetch_payment", {"payment_id": "pay_1002"}), "SERVER_UNTRUSTED", "REFUSED",
               ["evil-mcp@6.6.6"])

    # The rail's payments are in INR; this mandate allows refunds in USD only.
    def dollars(m):
        m["scope"]["grants"]["create_refund"]["value"]["currencies"] = ["USD"]

    _, _, args = rig.serve("usd", rig.mandate("usd", dollars))
    async with Session(rig, args) as s:
        expect(await refund(s, "pay_1002", 1000), "CURRENCY_NOT_ALLOWED", "REFUSED", ["INR", "USD"])

    # No pins at all.
    _, _, args = rig.serve("unpinned", rig.mandate("unpinned", provenance=False))
    async with Session(rig, args) as s:
        expect(await refund(s, "pay_1002", 1000), "PROVENANCE_MISSING", "REFUSED", ["interlock pin"])

    # Not yet valid: serve refuses to start, and says why.
    def later(m):
        m["issued_at"] = int(time.time() * 1000) + 86400000

    _, _, args = rig.serve("early", rig.mandate("early", later))
    early = subprocess.run([rig.interlock, *args], capture_output=True, text=True, env=env(), stdin=subprocess.DEVNULL)
    check(early.returncode == 1 and "not in force" in early.stderr, f"early: {early.returncode} {early.stderr}")
    check(early.stdout == "", "nothing on stdout")


async def rugpull_scene(rig):
    # An unrelated upstream that rewrites a pinned tool while the proxy serves it, and offers a
    # write that Interlock must never forward, granted or not.
    writes = os.path.join(rig.dir, "rugpull-writes.txt")
    upstream = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "rugpull_server.py"),
                writes]
    pinned = rig.cli("pin", "--json", "--", *upstream)
    check(pinned.returncode == 0, f"pin: {pinned.stderr}")
    pins = json.loads(pinned.stdout)

    def granted(m):
        read = {"reversibility": "reversible",
                "value": {"max_amount_minor": 0, "min_amount_minor": 0, "currencies": ["INR"]}}
        m["scope"]["grants"] = {"echo": copy.deepcopy(read), "write_note": copy.deepcopy(read)}
        m["idempotency"] = {}
        m["provenance"] = {
            "server_id": pins["server_id"],
            "manifest_sha256": pins["manifest_sha256"],
            "pinned_manifests": {t: {"sha256": h, "trust_tier": "pinned"} for t, h in pins["tools"].items()},
        }

    mandate = rig.mandate("rugpull", granted)
    db = os.path.join(rig.dir, "rugpull.ledger.db")
    args = rig.serve_args("rugpull", mandate, db, AGENT, (), upstream)
    changed = asyncio.Event()

    async def on_message(message):
        if "list_changed" in repr(message) or "ListChanged" in type(message).__name__:
            changed.set()

    async with Session(rig, args, message_handler=on_message) as s:
        names = sorted(t.name for t in (await s.list_tools()).tools)
        check(names == ["echo"], f"only the read is listed, not the unguarded write: {names}")
        expect(await call(s, "write_note", {"text": "hi"}), "TOOL_NOT_READ_ONLY", "REFUSED",
               ["write_note", "readOnlyHint"])
        check(not os.path.exists(writes), "the refused write never reached the upstream")
        # The first echo is forwarded; the upstream then rewrites echo under the pin.
        echoed = await call(s, "echo", {"text": "hello"})
        check(echoed.is_error is not True and text_of(echoed) == "hello", f"echo forwarded: {echoed!r}")
        # The upstream's notification reaches the agent through the proxy.
        await asyncio.wait_for(changed.wait(), 10)
        names = sorted(t.name for t in (await s.list_tools()).tools)
        check(names == [], f"the rewritten echo is no longer listed: {names}")
        expect(await call(s, "echo", {"text": "hello"}), "TOOL_DRIFTED", "REFUSED", ["echo"])


async def http_scene(rig, summary):
    """Two agents on one HTTP server and one ledger, each with its own token and mandate: the
    token alone says who calls; a missing or wrong token gets 401 with `WWW-Authenticate`; a
    session opened by one agent is 404 to the other; each agent's calls are judged by its own
    mandate; the same refund asked by both moves money once."""
    ops = "agent_ops_bot"
    ops_token = "ilk_e2e_ops_" + os.urandom(16).hex()

    def small(m):
        m["agent_id"] = ops
        m["scope"]["grants"]["create_refund"]["value"]["max_amount_minor"] = 20000

    journal, mock = rig.mock_args("http")
    summary["http_journal"] = journal
    db = os.path.join(rig.dir, "http.ledger.db")
    agents = os.path.join(rig.dir, "http.agents.yaml")
    with open(agents, "w") as f:
        json.dump({"agents": [
            {"id": AGENT, "mandate": rig.mandate("http_support"), "token_sha256": token_sha256(TOKEN)},
            {"id": ops, "mandate": rig.mandate("http_ops", small), "token_sha256": token_sha256(ops_token)},
        ]}, f)
    listen = f"127.0.0.1:{free_port()}"
    args = ["serve", "--listen", listen, "--agents", agents, "--db", db, "--", *mock]
    proc = await start_http_server(rig.interlock, args, listen, os.path.join(rig.dir, "http.stderr"))
    url = f"http://{listen}/mcp"
    try:
        async with httpx2.AsyncClient(timeout=CALL_TIMEOUT) as raw:
            # No token, an unknown token: 401 and the challenge the MCP authorization spec names.
            for token, error in ((None, None), ("ilk_not_a_token", "invalid_token")):
                r = await raw.post(url, json=INITIALIZE, headers=mcp_headers(token))
                challenge = r.headers.get("www-authenticate", "")
                check(r.status_code == 401 and challenge.startswith("Bearer "), f"{token}: {r.status_code} {challenge!r}")
                check((error is None) == ("error=" not in challenge) and (error or "") in challenge,
                      f"the challenge for {token}: {challenge!r}")
            # A session the support agent opened is not the ops agent's (nor anyone's without a token).
            r = await raw.post(url, json=INITIALIZE, headers=mcp_headers(TOKEN))
            session = r.headers.get("mcp-session-id")
            check(r.status_code == 200 and session, f"initialize: {r.status_code} {r.headers}")
            listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            r = await raw.post(url, json=listing, headers=mcp_headers(ops_token, session))
            check(r.status_code == 404, f"the other agent's session: {r.status_code} {r.text}")
            r = await raw.post(url, json=listing, headers=mcp_headers(None, session))
            check(r.status_code == 401, f"a session without a token: {r.status_code}")
            r = await raw.delete(url, headers=mcp_headers(TOKEN, session))
            check(r.status_code in (200, 204), f"closing the session: {r.status_code}")

        # The SDK's own client with a wrong token does not get in.
        try:
            async with connect(listen, "ilk_not_a_token") as s:
                check(False, "a wrong token opened a session")
        except Failed:
            raise
        except BaseException as e:
            # The SDK reports the 401 as an error response (the raw requests above check its status).
            while isinstance(e, BaseExceptionGroup) and e.exceptions:
                e = e.exceptions[0]
            check(type(e).__name__ == "MCPError" and "error response" in str(e), f"a wrong token: {e!r}")

        async with connect(listen, TOKEN) as support, connect(listen, ops_token) as ops_session:
            # Each agent under its own mandate: 500 INR is within support's ceiling, not ops'.
            applied = expect(await refund(support, "pay_3001", 50000), "APPLIED", "APPLIED")
            expect(await refund(ops_session, "pay_3002", 50000), "AMOUNT_ABOVE_CEILING", "REFUSED",
                   ["50000", "20000"])
            # One ledger for both: the ops agent asking for a refund support made moves nothing.
            small_one = expect(await refund(support, "pay_3003", 10000), "APPLIED", "APPLIED")
            replay = expect(await refund(ops_session, "pay_3003", 10000), "IDEMPOTENT_REPLAY", "APPLIED")
            check(replay["rail_entity_id"] == small_one["rail_entity_id"], f"one entity: {replay} {small_one}")
            summary["http_entities"] = [applied["rail_entity_id"], small_one["rail_entity_id"]]

        # The bounds: a body past 256 KiB is 413; a 17th open session of one agent is 429, and
        # closing one makes room. (The SDK sessions above are closed: their DELETEs freed them.)
        async with httpx2.AsyncClient(timeout=CALL_TIMEOUT) as raw:
            huge = dict(INITIALIZE, params=dict(INITIALIZE["params"], padding="x" * (300 * 1024)))
            r = await raw.post(url, json=huge, headers=mcp_headers(TOKEN))
            check(r.status_code == 413, f"a 300 KiB body: {r.status_code}")
            opened = []
            for _ in range(16):
                r = await raw.post(url, json=INITIALIZE, headers=mcp_headers(ops_token))
                check(r.status_code == 200, f"session {len(opened) + 1} of 16: {r.status_code} {r.text}")
                opened.append(r.headers["mcp-session-id"])
            r = await raw.post(url, json=INITIALIZE, headers=mcp_headers(ops_token))
            check(r.status_code == 429 and "16 sessions" in r.text, f"a 17th session: {r.status_code} {r.text}")
            r = await raw.post(url, json=INITIALIZE, headers=mcp_headers(TOKEN))
            check(r.status_code == 200, f"the other agent is not bounded by ops' sessions: {r.status_code}")
            r = await raw.delete(url, headers=mcp_headers(ops_token, opened[0]))
            check(r.status_code == 204, f"closing one: {r.status_code}")
            r = await raw.post(url, json=INITIALIZE, headers=mcp_headers(ops_token))
            check(r.status_code == 200, f"room again after closing one: {r.status_code} {r.text}")
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


async def inflight_scene(rig):
    """The per-agent bound on requests in flight (32): forty reads at once from one agent on a
    slow rail (5 s a call). Those past the bound are refused at once with the bound named (a JSON-RPC error,
    nothing sent upstream); the rest are answered; once they have, there is room again."""
    _, _, args = rig.serve("inflight", rig.mandate("inflight"), faults="slow=5000")
    async with Session(rig, args) as s:
        many = [call(s, "fetch_payment", {"payment_id": "pay_1002"}) for _ in range(40)]
        results = await asyncio.gather(*many, return_exceptions=True)
        refused = [r for r in results if isinstance(r, BaseException)]
        answered = [r for r in results if not isinstance(r, BaseException)]
        for e in refused:
            check("32 requests in flight" in str(e), f"a refusal names the bound: {e!r}")
        for r in answered:
            check(r.is_error is not True, f"an answered read: {text_of(r)}")
        # All forty leave within far less than the 5 s each takes upstream: exactly 32 hold a slot.
        check((len(answered), len(refused)) == (32, 8), f"{len(answered)} answered, {len(refused)} refused")
        again = await call(s, "fetch_payment", {"payment_id": "pay_1002"})
        check(again.is_error is not True, f"room again once they answered: {text_of(again)}")


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e-raw", "version": "0"}}}


def mcp_headers(token, session=None):
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if session:
        headers["Mcp-Session-Id"] = session
    return headers


@contextlib.asynccontextmanager
async def connect(listen, token):
    """The Python SDK's streamable HTTP client on a running `interlock serve --listen`."""
    async with http_client(listen, token) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT) as session:
            await asyncio.wait_for(session.initialize(), CALL_TIMEOUT)
            yield session


async def expiring_scene(rig):
    expires = int(time.time() * 1000) + 5000

    def soon(m):
        m["expires_at"] = expires

    _, _, args = rig.serve("expiring", rig.mandate("expiring", soon))
    async with Session(rig, args) as s:
        await asyncio.sleep(max(0.0, expires / 1000 - time.time()) + 0.2)
        expect(await call(s, "fetch_payment", {"payment_id": "pay_1002"}), "MANDATE_EXPIRED", "REFUSED",
               ["expired"])
        expect(await refund(s, "pay_1002", 1000), "MANDATE_EXPIRED", "REFUSED")


async def scene(name, run):
    try:
        await run
    except Exception as e:
        # anyio wraps what fails inside a session in exception groups: name the first leaf.
        while isinstance(e, BaseExceptionGroup) and e.exceptions:
            e = e.exceptions[0]
        what = str(e) if isinstance(e, Failed) else f"{type(e).__name__}: {e}"
        raise Failed(f"{name}: {what}") from None


SCENES = {
    "main": lambda rig, summary: main_scene(rig, summary),
    "held": lambda rig, summary: held_scene(rig, summary),
    "attempts": lambda rig, summary: attempts_scene(rig, summary),
    "restart": lambda rig, summary: restart_scene(rig, summary),
    "expiring": lambda rig, summary: expiring_scene(rig),
    "rugpull": lambda rig, summary: rugpull_scene(rig),
    "tight": lambda rig, summary: tight_scene(rig, summary),
    "guards": lambda rig, summary: guard_scenes(rig),
    "reconciled": lambda rig, summary: reconciled_scene(rig, summary),
    "operator": lambda rig, summary: operator_scene(rig, summary),
    "terms": lambda rig, summary: terms_scene(rig, summary),
    "approvals": lambda rig, summary: approvals_scene(rig, summary),
}
# Scenes only the HTTP transport has.
HTTP_SCENES = {
    "http": lambda rig, summary: http_scene(rig, summary),
    "inflight": lambda rig, summary: inflight_scene(rig),
}


def scenes(rig):
    return {**SCENES, **HTTP_SCENES} if rig.transport == "http" else SCENES


async def main(rig, only):
    summary = {}
    started = time.monotonic()
    # Independent scenes (each its own ledger and journal) run side by side, under one bound.
    try:
        await asyncio.wait_for(
            asyncio.gather(*(scene(name, run(rig, summary)) for name, run in scenes(rig).items()
                             if not only or name in only)),
            SCRIPT_TIMEOUT,
        )
    except BaseException as e:  # a failed check, the overall bound
        print(f"e2e: FAILED: {type(e).__name__}: {e}", flush=True)
        # Not asyncio.run's clean-up: sessions still open would wait on their proxies.
        os._exit(1)
    summary["seen"] = sorted(SEEN)
    summary["seconds"] = round(time.monotonic() - started, 1)
    print("e2e: " + json.dumps(summary))
    print("e2e: ok")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--interlock", required=True)
    parser.add_argument("--mock", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--pins", required=True)
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                        help="how the client reaches interlock: stdio, or streamable HTTP with a bearer token")
    parser.add_argument("--only", nargs="*", default=[], help="run only these scenes (debugging)")
    a = parser.parse_args()
    with open(a.pins) as f:
        pins = json.load(f)
    # If the bound itself cannot fire (a blocked loop), show where everything is stuck.
    faulthandler.dump_traceback_later(SCRIPT_TIMEOUT + 30, exit=True)
    faulthandler.register(signal.SIGUSR1)
    asyncio.run(main(Rig(a.interlock, a.mock, a.dir, pins, a.transport), a.only))
