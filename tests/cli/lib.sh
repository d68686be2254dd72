# lib.sh — helpers for CLI tests (sourced). MUSER_BIN, MUSER_TEST_DATA and
# MUSER_DEFAULT_DATA_DIR come from ctest.
set -u
M=${MUSER_BIN:?MUSER_BIN not set}
DATA=${MUSER_TEST_DATA:?MUSER_TEST_DATA not set}
SHARED=${MUSER_DATA_DIR:-${MUSER_DEFAULT_DATA_DIR:-}}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*" >&2; }
# expect_status CODE cmd...: runs cmd, checks the exit status
expect_status() {
  local want=$1; shift
  "$@" >"$TMP/out" 2>"$TMP/err"
  local got=$?
  if [ "$got" = "$want" ]; then ok; else bad "exit $got (want $want): $* -- $(head -c 400 "$TMP/err")"; fi
}
# expect_grep PATTERN FILE
expect_grep() {
  if grep -q -- "$1" "$2"; then ok; else bad "'$1' not found in $(basename "$2"): $(head -c 400 "$2")"; fi
}
finish() {
  echo "$(basename "$0"): $passed passed, $failed failed"
  [ "$failed" = 0 ]
}
