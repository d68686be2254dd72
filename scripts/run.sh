#!/usr/bin/env bash
# The main job: install what is missing, build, and generate text with the
# bundled model (stories260K). Extra arguments go to `muser run`, e.g.
#   scripts/run.sh -p "Once upon a time" -n 128 --temp 0
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# stdout is the story alone: the build's progress is one line on stderr
echo "run.sh: building build/muser (a few minutes the first time) ..." >&2
scripts/build.sh >/dev/null
if [ $# -eq 0 ]; then
  set -- -p "Once upon a time" -n 200
fi
exec build/muser run "$@"
