"""The official MCP Python SDK calling, through Toolhost's MCP face, tools of a server Toolhost
mounted (used by apps/tui/tests/mcp_mount.rs).

usage: mounted_client.py IMAGE_TOOL STRUCTURED_TOOL COMMAND [ARG...]

Lists the tools, calls IMAGE_TOOL with {} and STRUCTURED_TOOL with {"location": "Chicago"}, and
prints one JSON object with what came back.
"""

import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters


def blocks(result):
    out = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text":
            out.append({"type": "text", "text": block.text})
        elif kind == "image":
            out.append({"type": "image", "mimeType": block.mime_type, "bytes": len(block.data)})
        else:
            out.append({"type": kind})
    return out


async def main():
    image_tool, structured_tool = sys.argv[1], sys.argv[2]
    server = StdioServerParameters(command=sys.argv[3], args=sys.argv[4:], env=dict(os.environ))
    async with Client(server) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        image = await client.call_tool(image_tool, {})
        weather = await client.call_tool(structured_tool, {"location": "Chicago"})
        listed = tools.get(structured_tool)
        print(
            json.dumps(
                {
                    "image": {"is_error": bool(image.is_error), "content": blocks(image)},
                    "weather": {
                        "is_error": bool(weather.is_error),
                        "structured": weather.structured_content,
                    },
                    "names": sorted(tools),
                    "output_schema": listed.output_schema if listed else None,
                    "annotations": listed.annotations.model_dump(by_alias=True, exclude_none=True)
                    if listed and listed.annotations
                    else None,
                }
            )
        )


asyncio.run(main())
