"""A stdio MCP server over AgentDojo's banking environment (suite v1.2.2), for the benchmark in
this folder: the tools an AgentDojo banking agent has, run by AgentDojo's own tool functions on an
environment kept in a JSON file.

Usage: server.py --state STATE.json [--full-suite] [--log-level LEVEL]

- STATE.json is the environment as AgentDojo's pydantic models dump it (`bank_account`,
  `filesystem`, `user_account`). On EVERY tool call the server loads it, runs the AgentDojo tool
  function on it (through AgentDojo's `FunctionsRuntime.run_function`, so argument validation and
  error text are AgentDojo's), and after a tool that can change the environment writes it back
  atomically (a temporary file in the same folder, then rename). One long-lived process can
  therefore serve many runs if its caller rewrites the file between them.
- The environment type: by default it is built from the tools themselves, one field per
  `Depends("...")` of AgentDojo's tool functions, typed with AgentDojo's own models (BankAccount,
  Filesystem, UserAccount): the same three fields as the suite's `BankingEnvironment`. This keeps
  start-up to the three small tool modules (~0.2 s) instead of the whole package (~3 s: importing
  the suite pulls in every LLM SDK AgentDojo supports). `--full-suite` imports the suite instead
  (`get_suite("v1.2.2", "banking")`) and uses its `environment_type` and `tools`; the harness
  validates the file with the suite's own type after every run either way.
- Tools, with AgentDojo's names, parameters and descriptions (each tool's docstring summary;
  each parameter's docstring line): send_money, schedule_transaction,
  update_scheduled_transaction, get_balance, get_iban, get_most_recent_transactions,
  get_scheduled_transactions, read_file, get_user_info, update_password, update_user_info.
  Reads are annotated readOnlyHint true; writes readOnlyHint false, destructiveHint true.
  Arguments are checked against the advertised JSON Schema first (an amount must be a JSON
  number, never a string; no unknown keys); a null optional argument counts as absent.
- Results are one text content holding JSON: reads give the data (transactions as objects with
  id, sender, recipient, amount, subject, date, recurring); send_money and schedule_transaction
  give the created transaction {id, recipient, amount, subject, date, recurring, message}, with
  AgentDojo's message; update_scheduled_transaction gives the updated transaction the same way.
  Bad arguments or an AgentDojo exception give an MCP error result (isError true) saying why.
- Logs go to stderr only; stdout carries JSON-RPC.
"""

import argparse
import json
import logging
import os
import stat
import sys
import tempfile
import typing
from pathlib import Path

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

SUITE_VERSION = "v1.2.2"
SUITE_NAME = "banking"

# The tools that can change the environment; all others only read it.
WRITES = frozenset(
    {"send_money", "schedule_transaction", "update_scheduled_transaction", "update_password", "update_user_info"}
)

# MCP tool order: the order the suite lists its tools in (banking/task_suite.py's TOOLS).
TOOL_ORDER = (
    "get_iban",
    "send_money",
    "schedule_transaction",
    "update_scheduled_transaction",
    "get_balance",
    "get_most_recent_transactions",
    "get_scheduled_transactions",
    "read_file",
    "get_user_info",
    "update_password",
    "update_user_info",
)

log = logging.getLogger("agentdojo-banking")


class ToolError(Exception):
    """A call that cannot be served; its text becomes the error result."""


# --- AgentDojo's tools and environment type -------------------------------------------------


def light_tools():
    """AgentDojo's banking tools, from the three tool modules only (no suite import)."""
    from agentdojo.default_suites.v1.tools import banking_client, file_reader, user_account
    from agentdojo.functions_runtime import make_function

    modules = (banking_client, file_reader, user_account)
    functions = []
    for name in TOOL_ORDER:
        fn = next(getattr(m, name) for m in modules if hasattr(m, name))
        functions.append(make_function(fn))
    return functions


def suite_tools():
    """The suite's own tools and environment type (imports the whole AgentDojo package)."""
    from agentdojo.task_suite.load_suites import get_suite

    suite = get_suite(SUITE_VERSION, SUITE_NAME)
    return list(suite.tools), suite.environment_type


def environment_type_from_tools(functions):
    """A TaskEnvironment with one field per `Depends("attr")` of the tools, typed as the tool
    functions annotate it: for the banking tools, bank_account: BankAccount,
    filesystem: Filesystem, user_account: UserAccount."""
    import pydantic
    from agentdojo.functions_runtime import TaskEnvironment

    fields = {}
    for f in functions:
        hints = typing.get_type_hints(f.run, include_extras=True)
        for arg, dep in f.dependencies.items():
            attr = dep.env_dependency
            if not isinstance(attr, str):
                raise TypeError(f"{f.name}: dependency {dep!r} is not an attribute name")
            model = typing.get_args(hints[arg])[0]
            if attr in fields and fields[attr][0] is not model:
                raise TypeError(f"{attr} is typed {fields[attr][0]} and {model}")
            fields[attr] = (model, ...)
    return pydantic.create_model("BankingEnvironment", __base__=TaskEnvironment, **fields)


# --- JSON Schemas and argument checks ---------------------------------------------------------

_JSON_TYPES = {"string", "number", "integer", "boolean"}


def input_schema(function):
    """The MCP input schema of an AgentDojo Function: its pydantic parameters' JSON Schema, with
    `X | None = None` written as plain `X` (optional, not required) and no unknown keys."""
    raw = function.parameters.model_json_schema()
    properties = {}
    for name, prop in raw.get("properties", {}).items():
        if "anyOf" in prop:
            kinds = [p["type"] for p in prop["anyOf"] if p.get("type") != "null"]
            if len(kinds) != 1:
                raise TypeError(f"{function.name}.{name}: cannot simplify {prop}")
            json_type = kinds[0]
        else:
            json_type = prop["type"]
        if json_type not in _JSON_TYPES:
            raise TypeError(f"{function.name}.{name}: unsupported type {json_type}")
        out = {"type": json_type, "description": prop.get("description", "")}
        if prop.get("default") is not None:
            out["default"] = prop["default"]
        properties[name] = out
    return {
        "type": "object",
        "properties": properties,
        "required": list(raw.get("required", [])),
        "additionalProperties": False,
    }


def _type_ok(json_type, value):
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if json_type == "number":
        return isinstance(value, (int, float))
    if json_type == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    return False


def check_arguments(name, schema, arguments):
    """The arguments as AgentDojo's function takes them, or ToolError: each checked against the
    schema's type; a number becomes a float, an integer an int; a null optional is dropped."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ToolError(f"{name}: arguments must be an object")
    properties = schema["properties"]
    unknown = sorted(set(arguments) - set(properties))
    if unknown:
        raise ToolError(f"{name}: unknown argument(s) {', '.join(unknown)}; takes {', '.join(properties) or 'none'}")
    out = {}
    for key, value in arguments.items():
        if value is None and key not in schema["required"]:
            continue
        json_type = properties[key]["type"]
        if not _type_ok(json_type, value):
            raise ToolError(f"{name}: argument {key} must be a JSON {json_type}, got {json.dumps(value)}")
        if json_type == "number":
            value = float(value)
        elif json_type == "integer":
            value = int(value)
        out[key] = value
    missing = [k for k in schema["required"] if k not in out]
    if missing:
        raise ToolError(f"{name}: missing required argument(s) {', '.join(missing)}")
    return out


# --- the state file --------------------------------------------------------------------------


def load_state(path, env_type):
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ToolError(f"cannot read the environment file {path}: {e}") from e
    try:
        return env_type.model_validate_json(text)
    except ValueError as e:
        raise ToolError(f"the environment file {path} is not a valid banking environment: {e}") from e


def save_state(path, env):
    """Write the environment to `path` atomically: a temporary file beside it, then rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        try:  # keep the file's mode (mkstemp makes it 0600)
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        except FileNotFoundError:
            pass
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(env.model_dump_json(indent=1))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --- results ---------------------------------------------------------------------------------


def to_json_value(value):
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json_value(v) for k, v in value.items()}
    return value


def transaction_answer(t, message):
    return {
        "id": t.id,
        "recipient": t.recipient,
        "amount": t.amount,
        "subject": t.subject,
        "date": t.date,
        "recurring": t.recurring,
        "message": message,
    }


class Banking:
    """The tools over one state file."""

    def __init__(self, state, full_suite=False):
        self.state = state
        if full_suite:
            functions, self.env_type = suite_tools()
        else:
            functions = light_tools()
            self.env_type = environment_type_from_tools(functions)
        from agentdojo.functions_runtime import FunctionsRuntime

        by_name = {f.name: f for f in functions}
        missing = [n for n in TOOL_ORDER if n not in by_name]
        if missing:
            raise RuntimeError(f"AgentDojo lacks tool(s) {missing}")
        self.functions = [by_name[n] for n in TOOL_ORDER]
        self.runtime = FunctionsRuntime(self.functions)
        self.schemas = {f.name: input_schema(f) for f in self.functions}

    def tools(self):
        out = []
        for f in self.functions:
            if f.name in WRITES:
                annotations = types.ToolAnnotations(read_only_hint=False, destructive_hint=True)
            else:
                annotations = types.ToolAnnotations(read_only_hint=True)
            out.append(
                types.Tool(
                    name=f.name,
                    description=f.description,
                    input_schema=self.schemas[f.name],
                    annotations=annotations,
                )
            )
        return out

    def call(self, name, arguments):
        """The JSON text answering one call, or ToolError. Runs without awaiting anything, so
        calls on one process never interleave between loading and saving the state."""
        if name not in self.schemas:
            raise ToolError(f"unknown tool {name!r}; tools: {', '.join(TOOL_ORDER)}")
        args = check_arguments(name, self.schemas[name], arguments)
        env = load_state(self.state, self.env_type)
        account = env.bank_account
        before = (len(account.transactions), len(account.scheduled_transactions))
        result, error = self.runtime.run_function(env, name, args)
        if error is not None:
            raise ToolError(f"{name} failed: {error}")
        if name == "send_money" or name == "schedule_transaction":
            created = account.transactions if name == "send_money" else account.scheduled_transactions
            index = 0 if name == "send_money" else 1
            if len(created) != before[index] + 1:
                raise ToolError(f"{name}: AgentDojo reported {result!r} but no transaction was added")
            answer = transaction_answer(created[-1], result["message"])
        elif name == "update_scheduled_transaction":
            t = next(t for t in account.scheduled_transactions if t.id == args["id"])
            answer = transaction_answer(t, result["message"])
        else:
            answer = to_json_value(result)
        if name in WRITES:
            save_state(self.state, env)
        return json.dumps(answer, ensure_ascii=False)


def text_result(text, is_error=False):
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


async def serve(banking):
    from importlib.metadata import version

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=banking.tools())

    async def call_tool(ctx, params):
        name = params.name
        try:
            text = banking.call(name, params.arguments)
        except ToolError as e:
            log.info("call %s %s -> error: %s", name, json.dumps(params.arguments), e)
            return text_result(str(e), is_error=True)
        except Exception as e:  # an AgentDojo or state-file failure must not end the server
            log.exception("call %s failed", name)
            return text_result(f"{name} failed: {type(e).__name__}: {e}", is_error=True)
        log.info("call %s %s -> %s", name, json.dumps(params.arguments), text[:200])
        return text_result(text)

    server = Server(
        "agentdojo-banking",
        version=version("agentdojo"),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    options = server.create_initialization_options()
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", required=True, help="the environment JSON file, read and written on every call")
    parser.add_argument("--full-suite", action="store_true", help="import the whole suite for its environment type")
    parser.add_argument("--log-level", default=os.environ.get("BANKING_SERVER_LOG", "WARNING"))
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(), format="banking-server: %(message)s")
    if not Path(args.state).is_file():
        parser.error(f"no state file {args.state}")
    banking = Banking(os.path.abspath(args.state), full_suite=args.full_suite)
    anyio.run(serve, banking)


if __name__ == "__main__":
    main()
