"""Drive interlock-rail-mock with the Python `mcp` 2.x client: a real MCP peer no one here wrote.

Usage: client_smoke.py BINARY JOURNAL
Lists the tools, fetches a payment, creates a refund, checks an error result. Exits non-zero with
a message naming the failed check.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

EXPECTED_TOOLS = {
    "fetch_payment",
    "fetch_order",
    "create_refund",
    "fetch_refund",
    "fetch_multiple_refunds_for_payment",
    "fetch_all_refunds",
    "create_instant_settlement",
    "fetch_all_instant_settlements",
    "fetch_instant_settlement_with_id",
    "fetch_balance",
}


def check(condition, what):
    if not condition:
        raise SystemExit(f"client_smoke: FAILED: {what}")


def only_text(result):
    check(len(result.content) == 1, f"one content block, got {result.content!r}")
    check(result.content[0].type == "text", f"a text block, got {result.content[0]!r}")
    return result.content[0].text


async def main(binary, journal):
    params = StdioServerParameters(
        command=binary,
        args=["--journal", journal, "--seed", "demo", "--log-level", "error"],
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=20) as session:
            init = await session.initialize()
            check(init.server_info.name == "interlock-rail-mock", f"server name {init.server_info!r}")

            tools = await session.list_tools()
            by_name = {t.name: t for t in tools.tools}
            check(set(by_name) == EXPECTED_TOOLS, f"tool names {sorted(by_name)}")
            refund_tool = by_name["create_refund"]
            check(refund_tool.annotations.destructive_hint is True, "create_refund is destructive")
            check(refund_tool.annotations.read_only_hint is False, "create_refund is not read-only")
            check(by_name["fetch_payment"].annotations.read_only_hint is True, "fetch_payment is read-only")
            check(
                refund_tool.input_schema["required"] == ["payment_id", "amount"],
                f"create_refund requires {refund_tool.input_schema.get('required')}",
            )

            result = await session.call_tool("fetch_payment", {"payment_id": "pay_1002"})
            check(result.is_error is not True, f"fetch_payment failed: {result!r}")
            payment = json.loads(only_text(result))
            check(payment["entity"] == "payment" and payment["amount"] == 189900, f"payment {payment}")
            check(payment["refund_status"] is None, f"pay_1002 starts unrefunded: {payment}")

            result = await session.call_tool(
                "create_refund",
                {"payment_id": "pay_1002", "amount": 50000, "receipt": "ilk_py", "notes": {"interlock_sik": "py"}},
            )
            check(result.is_error is not True, f"create_refund failed: {result!r}")
            refund = json.loads(only_text(result))
            check(refund["id"].startswith("rfnd_") and refund["amount"] == 50000, f"refund {refund}")
            check(refund["receipt"] == "ilk_py" and refund["notes"] == {"interlock_sik": "py"}, f"stamps {refund}")

            result = await session.call_tool("fetch_payment", {"payment_id": "pay_1002"})
            payment = json.loads(only_text(result))
            check(payment["amount_refunded"] == 50000 and payment["refund_status"] == "partial", f"after {payment}")

            # A float amount, as Python would send 500.0: refused, a tool result with is_error.
            result = await session.call_tool("create_refund", {"payment_id": "pay_1002", "amount": 500.0})
            check(result.is_error is True, f"a float amount must be refused: {result!r}")
            check(
                only_text(result) == "creating refund failed: BAD_REQUEST_ERROR: The amount must be an integer.",
                f"error text {only_text(result)!r}",
            )
            result = await session.call_tool("create_refund", {"payment_id": "pay_1002", "amount": 140000})
            check(result.is_error is True, "an over-refund must be refused")
            check(
                only_text(result).endswith("greater than the unrefunded amount of 139900 on pay_1002"),
                f"error text {only_text(result)!r}",
            )
            print(f"client_smoke: ok ({len(by_name)} tools, protocol {init.protocol_version})")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: client_smoke.py BINARY JOURNAL")
    asyncio.run(main(sys.argv[1], sys.argv[2]))
