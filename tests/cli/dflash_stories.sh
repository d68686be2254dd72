#!/usr/bin/env bash
# The trained DFlash drafter shipped beside the bundled model
# (models/stories260K/stories260K-dflash.gguf, scripts/train_dflash.py):
# greedy text with the drafter is the plain greedy text token for token on
# several prompts, and the drafter earns its place: the mean accepted length
# `run` reports is above 1.5 on each of them (the target accepts one draft
# in two or better; an untrained drafter gives about 1.0).
. "$(dirname "$0")/lib.sh"
SRC=${MUSER_SRC:?}
MODEL=$SRC/models/stories260K/stories260K.gguf
DRAFT=$SRC/models/stories260K/stories260K-dflash.gguf

expect_status 0 "$M" inspect "$DRAFT"
expect_grep "dflash" "$TMP/out"

check_prompt() { # PROMPT [extra run options...]
  local p=$1; shift
  "$M" run -m "$MODEL" -p "$p" --temp 0 -n 128 -t 1 "$@" > "$TMP/plain" 2>/dev/null
  expect_status 0 "$M" run -m "$MODEL" --draft "$DRAFT" -p "$p" --temp 0 -n 128 -t 1 "$@"
  cmp -s "$TMP/out" "$TMP/plain" && ok || bad "--draft changed the greedy text for '$p': $(diff "$TMP/out" "$TMP/plain" | head -4)"
  # "draft: N steps, N drafted, N accepted (P%), mean accepted length L | ..."
  local len
  len=$(sed -n 's/^draft: .*mean accepted length \([0-9.]*\).*/\1/p' "$TMP/err")
  if [ -z "$len" ]; then
    bad "no mean accepted length reported for '$p': $(head -c 300 "$TMP/err")"
  elif awk -v l="$len" 'BEGIN { exit !(l > 1.5) }'; then
    ok
    echo "'$p' $*: mean accepted length $len"
  else
    bad "mean accepted length $len <= 1.5 for '$p' $*"
  fi
}

check_prompt "Once upon a time"
check_prompt "The little dog"
check_prompt "Tom and Sue went to the park"
check_prompt "Lily liked to"
check_prompt "One day, a big bear"
check_prompt "Once upon a time" --draft-max 4
finish
