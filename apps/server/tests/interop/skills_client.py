"""The official MCP Python SDK using Toolhost's skills (used by apps/tui/tests/cli.rs).

usage: skills_client.py PROMPT ARGUMENTS COMMAND [ARG...]

Lists the prompts, gets PROMPT with {"arguments": ARGUMENTS}, lists the tools and the resources,
reads skill://changelog/template.md, and prints one JSON object with what it saw.
"""

import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters


async def main():
    name, arguments = sys.argv[1], sys.argv[2]
    server = StdioServerParameters(command=sys.argv[3], args=sys.argv[4:], env=dict(os.environ))
    async with Client(server) as client:
        prompts = await client.list_prompts()
        got = await client.get_prompt(name, {"arguments": arguments})
        tools = await client.list_tools()
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        template_read = await client.read_resource("skill://changelog/template.md")
        activate = next((tool for tool in tools.tools if tool.name == "activateSkill"), None)
        print(
            json.dumps(
                {
                    "prompts": [
                        {
                            "name": prompt.name,
                            "description": prompt.description,
                            "arguments": [argument.name for argument in (prompt.arguments or [])],
                        }
                        for prompt in prompts.prompts
                    ],
                    "got": {
                        "description": got.description,
                        "messages": [
                            {"role": message.role, "text": getattr(message.content, "text", "")}
                            for message in got.messages
                        ],
                    },
                    "enum": activate.input_schema["properties"]["name"].get("enum") if activate else None,
                    "resources": sorted(str(resource.uri) for resource in resources.resources),
                    "templates": sorted(t.uri_template for t in templates.resource_templates),
                    "read": [getattr(c, "text", None) for c in template_read.contents],
                }
            )
        )


asyncio.run(main())
