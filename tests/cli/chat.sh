#!/usr/bin/env bash
# `muser chat` on a synthetic Muse Glimmer model: turns, /reset, /exit,
# end of input, a full context, and models without the chat format.
. "$(dirname "$0")/lib.sh"
"$M" synth --preset nano --mix q8_0 -o "$TMP/nano.gguf" 2>/dev/null || bad "synth failed"

printf 'hello there\nsecond turn\n/reset\nhi again\n/exit\nnever read\n' > "$TMP/in"
expect_status 0 "$M" chat -m "$TMP/nano.gguf" -n 6 -t 1 --seed 1 < "$TMP/in"
expect_grep "(conversation cleared)" "$TMP/out"
expect_grep "seed 1\. " "$TMP/err"
[ "$(grep -c . "$TMP/out")" -ge 3 ] && ok || bad "expected three answers"

# a line that is not UTF-8 is refused, and the chat goes on
printf 'caf\xe9\nhello\n' > "$TMP/in_latin1"
expect_status 0 "$M" chat -m "$TMP/nano.gguf" -n 3 -t 1 --seed 1 < "$TMP/in_latin1"
expect_grep "the line is not valid UTF-8 (byte 3 is 0xe9)" "$TMP/err"
[ "$(grep -c . "$TMP/out")" -ge 1 ] && ok || bad "no answer after the refused line"

# closed stdin: a clean exit
expect_status 0 "$M" chat -m "$TMP/nano.gguf" -n 4 -t 1 < /dev/null

# a turn longer than the context: a clear message, and the chat goes on
long=$(head -c 3000 /dev/zero | tr '\0' 'x' | sed 's/x/word /g')
printf '%s\nshort\n' "$long" > "$TMP/in2"
expect_status 0 "$M" chat -m "$TMP/nano.gguf" -c 128 -n 4 -t 1 < "$TMP/in2"
expect_grep "context is full" "$TMP/err"

# options and models without the format
expect_status 2 "$M" chat -m "$TMP/nano.gguf" --reasoning extreme
expect_status 1 "$M" chat < /dev/null
expect_grep "Muse Glimmer format only" "$TMP/err"
finish
