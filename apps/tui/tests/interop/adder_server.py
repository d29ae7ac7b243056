"""A small MCP server on the official Python SDK, for the mount tests.

python adder_server.py PORT     (streamable HTTP on 127.0.0.1:PORT)
python adder_server.py stdio
"""

import asyncio
import sys

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("adder")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Count to n, reporting progress at each step."""
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i} of {n}")
        await asyncio.sleep(0.05)
    return f"counted to {n}"


@server.tool()
def touch(path: str) -> str:
    """Create an empty file."""
    with open(path, "w", encoding="utf-8"):
        pass
    return f"created {path}"


def grown(word: str) -> str:
    """A tool added while the server runs."""
    return word * 2


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `grown`, and tell the client the tools changed."""
    server.add_tool(grown)
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason given."""
    raise ValueError(reason)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run()
    else:
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
