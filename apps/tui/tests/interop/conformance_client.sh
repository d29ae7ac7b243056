#!/bin/sh
# The client the MCP conformance suite tests (`conformance client --command "sh THIS"`): the
# terminal app mounting the suite's server, whose URL the suite appends as the last argument, as
# a person would with an mcp.toml. TOOLHOST_BIN names the app's binary.
set -eu
for url in "$@"; do :; done
config="$(mktemp -d)/mcp.toml"
cat > "$config" <<TOML
[servers.suite]
url = "$url"
trust = "auto"
TOML
case "${MCP_CONFORMANCE_SCENARIO:-}" in
  initialize) exec "$TOOLHOST_BIN" tools --mcp-config "$config" ;;
  tools_call) exec "$TOOLHOST_BIN" call suite__add_numbers '{"a": 2, "b": 3}' --mcp-config "$config" ;;
  *) echo "no such scenario here: ${MCP_CONFORMANCE_SCENARIO:-}" >&2; exit 2 ;;
esac
