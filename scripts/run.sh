#!/usr/bin/env bash
# The main job: install what is missing, build, and generate text with the
# bundled model (stories260K). Extra arguments go to `muser run`, e.g.
#   scripts/run.sh -p "Once upon a time" -n 128 --temp 0
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh >/dev/null
if [ $# -eq 0 ]; then
  set -- -p "Once upon a time" -n 200
fi
exec build/muser run "$@"
