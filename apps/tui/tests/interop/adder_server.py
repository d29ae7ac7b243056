"""A small MCP server on the official Python SDK, over streamable HTTP, for the mount tests.

python adder_server.py PORT
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("adder")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two whole numbers."""
    return a + b


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason given."""
    raise ValueError(reason)


if __name__ == "__main__":
    server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
