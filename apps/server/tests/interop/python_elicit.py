"""The official MCP Python SDK as a client that can be asked (MCP elicitation), used by the tests
of toolhost-server and the terminal app.

usage: python_elicit.py ANSWER NEGOTIATION stdio COMMAND [ARG...]
       python_elicit.py ANSWER NEGOTIATION http URL BEARER_KEY

Runs `touch made-by-client` with runCommand; when Toolhost asks, answers ANSWER: `allow_once`,
`allow_session`, `deny:REASON` (the form accepted with a denial and a reason), `decline` (the
form declined) or `cancel` (the form dismissed: no one answered); or `question:LABEL`, which calls askUser with a question whose options are
SQLite and Postgres instead, and answers by choosing LABEL. NEGOTIATION is `legacy` (the initialize handshake of 2025-11-25, where the server
sends `elicitation/create` requests) or `auto` (the newest revision, 2026-07-28, where the call
returns an input-required result and is retried with the answers). Prints one JSON object: the
protocol version, the questions asked and the call's result.
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client


def text_of(result):
    return "".join(getattr(block, "text", "") for block in result.content)


async def main():
    answer, negotiation, transport = sys.argv[1], sys.argv[2], sys.argv[3]
    if transport == "stdio":
        server = StdioServerParameters(command=sys.argv[4], args=sys.argv[5:], env=dict(os.environ))
    else:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {sys.argv[5]}"}, timeout=60)
        server = streamable_http_client(sys.argv[4], http_client=http)
    asked = []

    async def elicit(context, params):
        asked.append({"message": params.message, "schema": params.requested_schema})
        if answer == "decline":
            return types.ElicitResult(action="decline")
        if answer == "cancel":
            return types.ElicitResult(action="cancel")
        if answer.startswith("question:"):
            return types.ElicitResult(action="accept", content={"choice": answer[9:]})
        if answer.startswith("deny:"):
            return types.ElicitResult(action="accept", content={"decision": "deny", "reason": answer[5:]})
        return types.ElicitResult(action="accept", content={"decision": answer})

    async with Client(server, elicitation_callback=elicit, mode=negotiation) as client:
        if answer.startswith("question:"):
            question = {"question": "Which database?", "options": ["SQLite", "Postgres"]}
            result = await client.call_tool("askUser", question)
        else:
            result = await client.call_tool("runCommand", {"command": "touch made-by-client"})
        seen = {"is_error": bool(result.is_error), "text": text_of(result)}
        print(json.dumps({"protocol": client.protocol_version, "asked": asked, "result": seen}))


asyncio.run(main())
