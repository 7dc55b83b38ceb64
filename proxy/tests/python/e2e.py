"""Drive `interlock serve` with the Python `mcp` 2.x client: a real MCP peer no one here wrote.

Usage: e2e.py -- COMMAND [ARGS...]
COMMAND is the whole proxy command line (`interlock serve ... -- interlock-rail-mock ...`).
Checks the listing, a benign refund, its idempotent replay, an over-refund, a float amount, an
ungranted tool and 8 concurrent identical refunds. Prints one JSON line `e2e: {...}` with what
the Rust side checks against the rail's journal, then `e2e: ok`. Exits non-zero with a message
naming the failed check.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

GRANTED = {"fetch_payment", "create_refund", "create_instant_settlement"}


def check(condition, what):
    if not condition:
        raise SystemExit(f"e2e: FAILED: {what}")


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
    return info


async def refund(session, payment_id, amount):
    return await session.call_tool("create_refund", {"payment_id": payment_id, "amount": amount})


async def main(command, args):
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR")}
    env["RUST_LOG"] = "error"
    params = StdioServerParameters(command=command, args=args, env=env)
    summary = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=30) as session:
            init = await session.initialize()
            summary["server"] = init.server_info.name
            summary["protocol"] = init.protocol_version

            # Only the granted tools are listed.
            tools = await session.list_tools()
            names = {t.name for t in tools.tools}
            check(names == GRANTED, f"listed tools {sorted(names)}")

            # A benign refund: applied, with the interlock block.
            first = await refund(session, "pay_1002", 10000)
            check(first.is_error is not True, f"benign refund failed: {text_of(first)}")
            info = block(first)
            check(info["outcome"] == "APPLIED" and info["reason_code"] == "APPLIED", f"benign {info}")
            entity = info.get("rail_entity_id")
            check(isinstance(entity, str) and entity.startswith("rfnd_"), f"an entity in {info}")
            rail = json.loads(text_of(first))
            check(rail["id"] == entity and rail["amount"] == 10000, f"the rail's refund {rail}")
            check(rail["notes"]["interlock_sik"] == info["sik"], f"stamped with the SIK: {rail}")
            check(
                any(g["gate"] == "G6" and g["verdict"] == "ALLOW" for g in info["gates"]),
                f"G6 allowed: {info['gates']}",
            )
            summary["benign_entity"] = entity

            # The same refund again: an idempotent replay of the same entity.
            again = await refund(session, "pay_1002", 10000)
            check(again.is_error is not True, f"replay failed: {text_of(again)}")
            replay = block(again)
            check(replay["outcome"] == "APPLIED", f"replay {replay}")
            check(replay["reason_code"] == "IDEMPOTENT_REPLAY", f"replay {replay}")
            check(replay.get("idempotent_replay") is True, f"replay flag {replay}")
            check(replay.get("rail_entity_id") == entity and replay["sik"] == info["sik"], f"same entity {replay}")

            # An over-refund: pay_1003 has 200000 left of 250000.
            over = await refund(session, "pay_1003", 250000)
            check(over.is_error is True, f"an over-refund must be an error: {over!r}")
            over_info = block(over)
            check(over_info["outcome"] == "REFUSED", f"over {over_info}")
            check(over_info["reason_code"] == "REFUND_EXCEEDS_REFUNDABLE", f"over {over_info}")
            over_text = text_of(over)
            check("250000" in over_text and "200000" in over_text, f"the numbers: {over_text}")
            check(over_info.get("rail_entity_id") is None, f"no entity: {over_info}")

            # A float amount, as Python sends 500.0: refused before anything is spent.
            flt = await refund(session, "pay_1002", 500.0)
            check(flt.is_error is True, f"a float amount must be refused: {flt!r}")
            flt_info = block(flt)
            check(flt_info["reason_code"] == "ARGUMENTS_INVALID", f"float {flt_info}")
            check("float" in text_of(flt), f"float text {text_of(flt)!r}")

            # A tool the mandate does not grant: refused, though the rail has it.
            bal = await session.call_tool("fetch_balance", {})
            check(bal.is_error is True, f"an ungranted tool must be refused: {bal!r}")
            check(block(bal)["reason_code"] == "TOOL_NOT_GRANTED", f"ungranted {block(bal)}")

            # 8 identical refunds at once: one rail entity; the rest replay or are in progress.
            results = await asyncio.gather(*(refund(session, "pay_1005", 25000) for _ in range(8)))
            outcomes = []
            entities = set()
            for r in results:
                i = block(r)
                outcomes.append(i["outcome"])
                check(i["outcome"] in ("APPLIED", "IN_PROGRESS"), f"concurrent {i}")
                if i["outcome"] == "APPLIED":
                    entities.add(i["rail_entity_id"])
            check(len(entities) == 1, f"one entity among the concurrent refunds: {entities}")
            after = await refund(session, "pay_1005", 25000)
            check(block(after)["reason_code"] == "IDEMPOTENT_REPLAY", f"after the storm {block(after)}")
            check(block(after)["rail_entity_id"] in entities, f"the same entity {block(after)}")
            summary["concurrent_outcomes"] = outcomes
            summary["concurrent_entity"] = entities.pop()
    print("e2e: " + json.dumps(summary))
    print("e2e: ok")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "--":
        raise SystemExit("usage: e2e.py -- COMMAND [ARGS...]")
    asyncio.run(main(sys.argv[2], sys.argv[3:]))
