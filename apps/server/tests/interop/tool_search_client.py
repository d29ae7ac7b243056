"""The official MCP Python SDK finding a deferred tool of Toolhost (used by
apps/server/tests/mcp_interop.rs).

usage: tool_search_client.py QUERY COMMAND [ARG...]

Lists the tools, calls `searchTools` with QUERY, waits for `notifications/tools/list_changed`, lists
the tools again, and prints one JSON object with what it saw.
"""

import asyncio
import json
import os
import sys

import anyio
from mcp import Client, StdioServerParameters


def text_of(result):
    return "".join(getattr(block, "text", "") for block in result.content)


async def main():
    query = sys.argv[1]
    server = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:], env=dict(os.environ))
    changed = anyio.Event()
    seen_methods = []

    async def on_message(message):
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        seen_methods.append(str(method))
        if method == "notifications/tools/list_changed":
            changed.set()
        await anyio.lowlevel.checkpoint()

    async with Client(server, message_handler=on_message) as client:
        before = await client.list_tools()
        found = await client.call_tool("searchTools", {"query": query, "limit": 1})
        with anyio.move_on_after(10):
            await changed.wait()
        after = await client.list_tools()
        print(
            json.dumps(
                {
                    "capabilities": bool(client.server_capabilities.tools and client.server_capabilities.tools.list_changed),
                    "before": sorted(tool.name for tool in before.tools),
                    "found": {"is_error": bool(found.is_error), "text": text_of(found)},
                    "notified": changed.is_set(),
                    "methods": seen_methods,
                    "after": sorted(tool.name for tool in after.tools),
                }
            )
        )


asyncio.run(main())
