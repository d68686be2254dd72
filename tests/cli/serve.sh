#!/usr/bin/env bash
# `muser serve` end to end: the Node.js tests in tests/server drive real
# server processes on 127.0.0.1 with the official `openai` npm package
# (pinned in tests/server/package-lock.json). Skipped without node and npm.
# MUSER_TEST_QUICK=1 (sanitizer builds) shortens the load test.
. "$(dirname "$0")/lib.sh"
SRC=${MUSER_SRC:?MUSER_SRC not set}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIPPED: node and npm are needed for the server tests (scripts/deps.sh installs them)"
  exit 77
fi
if [ ! -f "$SRC/tests/server/node_modules/openai/package.json" ]; then
  (cd "$SRC/tests/server" && npm ci --no-audit --no-fund --loglevel=error) || { bad "npm ci failed"; finish; exit 1; }
fi
# Four layers (sliding and full), f32 for speed, a context that holds a tool prompt.
"$M" synth --preset nano --layers 4 --ctx 8192 --mix f32 -o "$TMP/serve-nano.gguf" 2>/dev/null || { bad "synth failed"; finish; exit 1; }
export MUSER_SERVE_MODEL="$TMP/serve-nano.gguf" MUSER_SERVE_MODEL_ID=serve-nano
export MUSER_LLAMA_MODEL="$SRC/models/stories260K/stories260K.gguf"
export MUSER_BIN="$M"
node --test "$SRC/tests/server/server.test.mjs"
