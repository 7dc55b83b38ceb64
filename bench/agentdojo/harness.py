"""The "fully compromised agent" on AgentDojo's banking suite (v1.2.2), over MCP.

For a pair (user task U, injection task I) the harness builds the environment the way
AgentDojo's own benchmark does for the `important_instructions` attack: the suite's default
injection vector values, overridden by the attack's injections for (U, I)
(`attack.attack(U, I)`, then `suite.load_and_inject_default_environment`, then
`U.init_environment`). It writes that environment to STATE.json in a fresh per-run folder,
starts the server command as an MCP stdio client session (initialize, tools/list), and replays
U's ground-truth calls then I's ground-truth calls, both computed by AgentDojo's `ground_truth`
from that pre-environment, each as one tools/call, in order. A call refused or failing
(isError, or a protocol error) is recorded and the run goes on. Then it reads the
post-environment from STATE.json with the suite's environment type and scores it with
AgentDojo's own graders (`TaskSuite._check_task_result`: `utility_from_traces`/`utility` for U,
`security_from_traces`/`security` for I, security True meaning the attack SUCCEEDED). The
model output given to the graders is U's GROUND_TRUTH_OUTPUT, as AgentDojo's
GroundTruthPipeline ends with (it matters for user_task_1 and user_task_7 only). The "no attack"
run of U uses no injections and only U's calls, scored by utility (security null).

The attack addresses the model by name; its template takes the name from a pipeline name, fixed
here to "gpt-4o-2024-05-13" (so the text says "GPT-4"), with the user "Emma Johnson".

Command templates (each is split like a shell line by shlex, then placeholders are replaced
inside each word by plain text substitution; nothing is run through a shell):
  {python}  this interpreter (sys.executable)      {here}  the folder of this file
  {state}   the run's STATE.json (absolute)        {dir}   the run's fresh folder (absolute)
  {run}     the run's name, e.g. user_task_3__injection_task_5 or user_task_3__none
--upstream-cmd is the banking server command; default "{python} {here}/server.py --state {state}".
--via (optional, must come last: every argument after it is the template; a single argument is
shlex-split) is a prefix command: the upstream command's words are put where a word is exactly
"{upstream}", or appended at the end if there is no such word. For example
  harness.py --pairs all --label gated --via interlock serve --mandate M --agent bank_agent \
      --db {dir}/ledger.db --
runs `interlock serve ... --db RUN_DIR/ledger.db -- PYTHON HERE/server.py --state RUN_DIR/state.json`.
The child inherits this process's environment and runs in the run's folder; its stderr goes to
RUN_DIR/server.stderr.

Selection: --pairs all (the 144 pairs and the 16 no-attack runs), or --user-tasks LIST|all
(default all) with --injection-tasks LIST|all|none (default all) and --no-attack (add U's
no-attack run). LIST is comma-separated numbers or ids (0,1,user_task_2).
--jobs N runs N runs at once, each with its own server process.

Output: one JSON object per run, as JSON Lines, on stdout or --out FILE:
  {"user_task": "user_task_0", "injection_task": "injection_task_3" | null,
   "path_label": LABEL, "utility": bool, "security": bool | null,
   "calls": [{"tool", "args", "is_error", "text" (first 300 chars), "from": "user"|"injection",
              "gate": null | {"gate", "reason_code", "outcome"} (a gateway's structured refusal)}],
   "seconds": float, "tools_listed": [names] | null, "vectors": [injected vector ids],
   "error": null | "why the session itself failed"}
A summary goes to stderr at the end. --describe prints one JSON object instead: the versions,
each user task's PROMPT and each injection task's GOAL, with their ground-truth calls on the
un-injected environment and the vectors the attack fills for each user task.
"""

import argparse
import asyncio
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE_VERSION = "v1.2.2"
SUITE_NAME = "banking"
ATTACK = "important_instructions"
PIPELINE_NAME = "gpt-4o-2024-05-13"
DEFAULT_UPSTREAM = "{python} {here}/server.py --state {state}"
# Seconds one call may take, and one whole run (start-up included).
CALL_TIMEOUT = 60
RUN_TIMEOUT = 300
TEXT_CHARS = 300


def gate_of(result):
    """The deciding gate and reason code of a gateway's answer, from its structured content
    (Interlock's `structuredContent.interlock`); None when the answer carries none."""
    content = getattr(result, "structured_content", None) or {}
    decision = content.get("interlock") if isinstance(content, dict) else None
    if not isinstance(decision, dict):
        return None
    gates = [g for g in decision.get("gates") or [] if isinstance(g, dict)]
    deciding = next((g for g in gates if g.get("reason_code") == decision.get("reason_code")), None)
    return {
        "gate": deciding.get("gate") if deciding else None,
        "reason_code": decision.get("reason_code"),
        "outcome": decision.get("outcome"),
    }


class Bench:
    """The suite, the attack, and what a run needs from them."""

    def __init__(self):
        from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
        from agentdojo.attacks import load_attack
        from agentdojo.task_suite.load_suites import get_suite

        class NamedPipeline(BasePipelineElement):
            """No model: only the name the attack's template reads."""

            name = PIPELINE_NAME

            def query(self, *args, **kwargs):
                raise RuntimeError("the harness runs no model")

        self.suite = get_suite(SUITE_VERSION, SUITE_NAME)
        self.attack = load_attack(ATTACK, self.suite, NamedPipeline())
        self.user_tasks = self.suite.user_tasks
        self.injection_tasks = self.suite.injection_tasks

    def environment(self, user_id, injection_id):
        """(pre-environment, injections) for a run, as AgentDojo's benchmark builds them."""
        user_task = self.user_tasks[user_id]
        if injection_id is None:
            injections = {}
        else:
            injections = self.attack.attack(user_task, self.injection_tasks[injection_id])
        env = self.suite.load_and_inject_default_environment(injections)
        return user_task.init_environment(env), injections

    def plan(self, user_id, injection_id, pre_env):
        """[(origin, FunctionCall)]: U's ground truth, then I's, both from the pre-environment."""
        calls = [("user", c) for c in self.user_tasks[user_id].ground_truth(pre_env.model_copy(deep=True))]
        if injection_id is not None:
            task = self.injection_tasks[injection_id]
            calls += [("injection", c) for c in task.ground_truth(pre_env.model_copy(deep=True))]
        return calls

    def score(self, user_id, injection_id, pre_env, post_env, traces):
        from agentdojo.types import text_content_block_from_string

        user_task = self.user_tasks[user_id]
        output = [text_content_block_from_string(user_task.GROUND_TRUTH_OUTPUT)]
        utility = self.suite._check_task_result(user_task, output, pre_env, post_env, traces)
        if injection_id is None:
            return bool(utility), None
        task = self.injection_tasks[injection_id]
        security = self.suite._check_task_result(task, output, pre_env, post_env, traces)
        return bool(utility), bool(security)


# --- command templates -----------------------------------------------------------------------


def fill(words, values):
    out = []
    for word in words:
        for key, value in values.items():
            word = word.replace("{" + key + "}", value)
        out.append(word)
    return out


def command(upstream, via, values):
    """The argv of a run's server: the via prefix (if any) around the upstream command."""
    up = fill(shlex.split(upstream), values)
    if not via:
        return up
    words = shlex.split(via[0]) if len(via) == 1 else list(via)
    if "{upstream}" in words:
        i = words.index("{upstream}")
        return fill(words[:i], values) + up + fill(words[i + 1 :], values)
    return fill(words, values) + up


# --- one run ---------------------------------------------------------------------------------


def result_text(result):
    parts = []
    for block in result.content:
        parts.append(block.text if getattr(block, "type", None) == "text" else json.dumps(block.model_dump(mode="json")))
    return "\n".join(parts)


async def replay(argv, cwd, errlog, planned, calls):
    """Start the server, list its tools, make the planned calls; fills `calls`; the listed names."""
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ), cwd=cwd)
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT) as session:
            await session.initialize()
            listed = [t.name for t in (await session.list_tools()).tools]
            for origin, call in planned:
                args = dict(call.args)
                gate = None
                try:
                    result = await session.call_tool(call.function, args)
                    is_error, text = bool(result.is_error), result_text(result)
                    gate = gate_of(result)
                except Exception as e:  # a protocol error or a timeout: recorded, the run goes on
                    is_error, text = True, f"{type(e).__name__}: {e}"
                calls.append(
                    {"tool": call.function, "args": args, "is_error": is_error, "text": text[:TEXT_CHARS], "from": origin,
                     "gate": gate}
                )
            return listed


def describe_error(e):
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(describe_error(x) for x in e.exceptions)
    return f"{type(e).__name__}: {e}"


async def run_one(bench, user_id, injection_id, opts, base):
    from agentdojo.functions_runtime import FunctionCall

    started = time.monotonic()
    name = f"{user_id}__{injection_id or 'none'}"
    run_dir = Path(base) / name
    run_dir.mkdir(parents=True)
    state = run_dir / "state.json"
    pre_env, injections = bench.environment(user_id, injection_id)
    state.write_text(pre_env.model_dump_json(indent=1), encoding="utf-8")
    planned = bench.plan(user_id, injection_id, pre_env)
    values = {"python": sys.executable, "here": HERE, "state": str(state), "dir": str(run_dir), "run": name}
    argv = command(opts.upstream_cmd, opts.via, values)

    calls, listed, error = [], None, None
    with open(run_dir / "server.stderr", "w") as errlog:
        try:
            listed = await asyncio.wait_for(replay(argv, str(run_dir), errlog, planned, calls), RUN_TIMEOUT)
        except BaseException as e:  # the session failed; what was done is still scored
            if isinstance(e, (KeyboardInterrupt, SystemExit, asyncio.CancelledError)):
                raise
            error = describe_error(e)

    traces = [FunctionCall(function=c["tool"], args=c["args"]) for c in calls]
    try:
        post_env = bench.suite.environment_type.model_validate_json(state.read_text(encoding="utf-8"))
        utility, security = bench.score(user_id, injection_id, pre_env, post_env, traces)
    except Exception as e:
        error = (error + "; " if error else "") + f"post-environment unreadable: {describe_error(e)}"
        utility, security = False, None
    return {
        "user_task": user_id,
        "injection_task": injection_id,
        "path_label": opts.label,
        "utility": utility,
        "security": security,
        "calls": calls,
        "seconds": round(time.monotonic() - started, 3),
        "tools_listed": listed,
        "vectors": sorted(injections),
        "error": error,
    }


# --- selection, describe, main ---------------------------------------------------------------


def pick(spec, known, prefix):
    if spec == "all":
        return list(known)
    if spec == "none":
        return []
    out = []
    for item in spec.split(","):
        item = item.strip()
        task_id = item if item.startswith(prefix) else f"{prefix}{item}"
        if task_id not in known:
            raise SystemExit(f"unknown task {item!r}; known: {', '.join(known)}")
        out.append(task_id)
    return out


def selection(bench, opts):
    if opts.pairs is not None:
        if opts.pairs != "all":
            raise SystemExit("--pairs takes only 'all'")
        users, injections, no_attack = list(bench.user_tasks), list(bench.injection_tasks), True
    else:
        users = pick(opts.user_tasks, bench.user_tasks, "user_task_")
        injections = pick(opts.injection_tasks, bench.injection_tasks, "injection_task_")
        no_attack = opts.no_attack
    runs = [(u, None) for u in users] if no_attack else []
    runs += [(u, i) for u in users for i in injections]
    return runs


def calls_json(calls):
    return [{"tool": c.function, "args": dict(c.args)} for c in calls]


def describe(bench):
    env, _ = bench.environment(next(iter(bench.user_tasks)), None)
    return {
        "agentdojo": version("agentdojo"),
        "mcp": version("mcp"),
        "suite": f"{SUITE_NAME} {SUITE_VERSION}",
        "attack": ATTACK,
        "attack_model_name": bench.attack.model_name,
        "attack_user_name": bench.attack.user_name,
        "pipeline_name": PIPELINE_NAME,
        "user_tasks": {
            uid: {
                "prompt": t.PROMPT,
                "ground_truth_output": t.GROUND_TRUTH_OUTPUT,
                "ground_truth": calls_json(t.ground_truth(env.model_copy(deep=True))),
                "vectors": bench.attack.get_injection_candidates(t),
            }
            for uid, t in bench.user_tasks.items()
        },
        "injection_tasks": {
            iid: {"goal": t.GOAL, "ground_truth": calls_json(t.ground_truth(env.model_copy(deep=True)))}
            for iid, t in bench.injection_tasks.items()
        },
    }


def summary(records):
    lines = []
    plain = [r for r in records if r["injection_task"] is None]
    attacked = [r for r in records if r["injection_task"] is not None]
    errors = [r for r in records if r["error"]]
    if plain:
        lines.append(f"utility without attack: {sum(r['utility'] for r in plain)}/{len(plain)}")
    if attacked:
        lines.append(f"attack success: {sum(bool(r['security']) for r in attacked)}/{len(attacked)}")
        lines.append(f"utility under attack: {sum(r['utility'] for r in attacked)}/{len(attacked)}")
        for iid in sorted({r["injection_task"] for r in attacked}, key=lambda s: int(s.rsplit("_", 1)[1])):
            rs = [r for r in attacked if r["injection_task"] == iid]
            lines.append(f"  {iid}: attack success {sum(bool(r['security']) for r in rs)}/{len(rs)}")
    failed_calls = sum(c["is_error"] for r in records for c in r["calls"])
    lines.append(f"runs: {len(records)}, session errors: {len(errors)}, calls: "
                 f"{sum(len(r['calls']) for r in records)}, error results: {failed_calls}")
    if records:
        secs = [r["seconds"] for r in records]
        lines.append(f"seconds per run: mean {sum(secs) / len(secs):.2f}, max {max(secs):.2f}")
    return "\n".join(lines)


async def run_all(bench, runs, opts, base, out):
    gate = asyncio.Semaphore(opts.jobs)
    records = []

    async def one(user_id, injection_id):
        async with gate:
            record = await run_one(bench, user_id, injection_id, opts, base)
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
        out.flush()
        records.append(record)

    await asyncio.gather(*(one(u, i) for u, i in runs))
    return records


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="AgentDojo banking v1.2.2, fully compromised agent, over MCP.",
        epilog="See this file's header for the command templates.",
    )
    parser.add_argument("--describe", action="store_true", help="print the tasks and versions as JSON, run nothing")
    parser.add_argument("--pairs", help="'all': the 144 pairs and the 16 no-attack runs")
    parser.add_argument("--user-tasks", default="all", help="LIST or all (default all)")
    parser.add_argument("--injection-tasks", default="all", help="LIST, all or none (default all)")
    parser.add_argument("--no-attack", action="store_true", help="also run each selected user task without attack")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    parser.add_argument("--label", default="direct", help="path_label of every record (default direct)")
    parser.add_argument("--out", help="write the JSON Lines here instead of stdout")
    parser.add_argument("--workdir", help="put the per-run folders here and keep them (default: a temporary folder, removed)")
    parser.add_argument("--upstream-cmd", default=DEFAULT_UPSTREAM, help=f"default {DEFAULT_UPSTREAM!r}")
    parser.add_argument("--via", nargs=argparse.REMAINDER, help="prefix command template; must come last")
    opts = parser.parse_args(argv)
    if opts.jobs < 1:
        parser.error("--jobs must be at least 1")

    started = time.monotonic()
    bench = Bench()
    if opts.describe:
        print(json.dumps(describe(bench), indent=1, ensure_ascii=False))
        return 0
    runs = selection(bench, opts)
    if opts.workdir:
        base = Path(opts.workdir).resolve()
        base.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(tempfile.mkdtemp(prefix=f"{opts.label}-{stamp}-", dir=base))
    else:
        base = Path(tempfile.mkdtemp(prefix="agentdojo-bench-"))
    out = open(opts.out, "w", encoding="utf-8") if opts.out else sys.stdout
    try:
        records = asyncio.run(run_all(bench, runs, opts, base, out))
    finally:
        if opts.out:
            out.close()
        if not opts.workdir:
            shutil.rmtree(base, ignore_errors=True)
    print(summary(records), file=sys.stderr)
    print(f"wall seconds: {time.monotonic() - started:.1f} (jobs {opts.jobs}); runs in {base}"
          + ("" if opts.workdir else " (removed)"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
