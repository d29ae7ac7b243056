"""Sequential tools/call over stdio with the official MCP Python SDK (apps/server/benches/mcp.rs).

usage: bench_client.py CALLS TOOL ARGUMENTS_JSON COMMAND [ARG...]

Warms up with 50 calls, then times CALLS calls one after another and prints one JSON object:
calls per second, p50 and p99 in microseconds, and whether every call succeeded; then CALLS pings
(`ping_p50_us`: a request that runs nothing, so the client's and the transport's own share of a
call).
"""

import asyncio
import json
import os
import sys
import time

from mcp import Client, StdioServerParameters


async def main():
    calls, tool, arguments = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
    server = StdioServerParameters(command=sys.argv[4], args=sys.argv[5:], env=dict(os.environ))
    # The initialize handshake's revision for both servers (the reference speaks no newer one),
    # so both are measured on the same protocol.
    async with Client(server, mode="legacy") as client:
        for _ in range(50):
            await client.call_tool(tool, arguments)
        latencies = []
        failures = 0
        started = time.perf_counter()
        for _ in range(calls):
            t = time.perf_counter()
            result = await client.call_tool(tool, arguments)
            latencies.append(time.perf_counter() - t)
            failures += bool(result.is_error)
        elapsed = time.perf_counter() - started
        pings = []
        for _ in range(calls):
            t = time.perf_counter()
            await client.send_ping()
            pings.append(time.perf_counter() - t)
    latencies.sort()
    pings.sort()
    print(json.dumps({
        "calls_per_second": calls / elapsed,
        "p50_us": latencies[len(latencies) // 2] * 1e6,
        "p99_us": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e6,
        "failures": failures,
        "ping_p50_us": pings[len(pings) // 2] * 1e6,
    }))


asyncio.run(main())
