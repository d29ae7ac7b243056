"""The official MCP Python SDK as a client of Toolhost (used by apps/server/tests/mcp_interop.rs).

usage: python_client.py stdio OUTSIDE_FILE COMMAND [ARG...]
       python_client.py http OUTSIDE_FILE URL BEARER_KEY

Lists the tools, reads `notes.txt` (inside the session's folder), OUTSIDE_FILE (outside it) and
`long.txt` (what a client preferring `structuredContent` would show its model), and prints one JSON
object with what it saw.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def text_of(result):
    return "".join(getattr(block, "text", "") for block in result.content)


async def main():
    mode, outside_file = sys.argv[1], sys.argv[2]
    if mode == "stdio":
        server = StdioServerParameters(command=sys.argv[3], args=sys.argv[4:], env=dict(os.environ))
    else:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {sys.argv[4]}"}, timeout=60)
        server = streamable_http_client(sys.argv[3], http_client=http)
    async with Client(server) as client:
        tools = await client.list_tools()
        inside = await client.call_tool("readFile", {"path": "notes.txt"})
        outside = await client.call_tool("readFile", {"path": outside_file})
        long = await client.call_tool("readFile", {"path": "long.txt"})
        # What a client that prefers structured content (Claude Code, Codex) puts before its model.
        shown = json.dumps(long.structured_content) if long.structured_content is not None else text_of(long)
        state = (long.meta or {}).get("toolhost/state") or {}
        print(
            json.dumps(
                {
                    "protocol": client.protocol_version,
                    "tools": sorted(tool.name for tool in tools.tools),
                    "read_only": {tool.name: bool(tool.annotations and tool.annotations.read_only_hint) for tool in tools.tools},
                    "inside": {"is_error": bool(inside.is_error), "text": text_of(inside)},
                    "outside": {"is_error": bool(outside.is_error), "text": text_of(outside)},
                    "long": {"shown": shown, "text_len": len(text_of(long)), "state_lines": state.get("total_lines")},
                }
            )
        )


asyncio.run(main())
