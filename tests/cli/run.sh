#!/usr/bin/env bash
# `muser run` on the bundled model: 256 greedy steps from BOS print exactly
# llama2.c's text; seeds make sampling reproducible; bad input is clear.
. "$(dirname "$0")/lib.sh"
SRC=${MUSER_SRC:?}
EXPECTED=$SRC/models/stories260K/greedy_t0_n256.expected.txt

expect_status 0 "$M" run --temp 0 -n 256 -t 1
cmp -s "$TMP/out" "$EXPECTED" && ok || bad "greedy text differs from greedy_t0_n256.expected.txt: $(diff "$TMP/out" "$EXPECTED" | head -5)"
expect_grep "decode: 256 tokens" "$TMP/err"
expect_grep "GB/s" "$TMP/err"
# the same with an explicit model path, two threads, and the reference backend agreeing on a prefix
expect_status 0 "$M" run -m "$SRC/models/stories260K/stories260K.gguf" --temp 0 -n 256 -t 2
cmp -s "$TMP/out" "$EXPECTED" && ok || bad "2-thread greedy text differs"
expect_status 0 "$M" run --backend ref --temp 0 -n 40
head -c 100 "$EXPECTED" > "$TMP/want"; head -c 100 "$TMP/out" > "$TMP/got"
cmp -s "$TMP/want" "$TMP/got" && ok || bad "ref backend greedy prefix differs"

# prompt continuation
expect_status 0 "$M" run -p "Once upon a time" --temp 0 -n 20 -t 1
expect_grep "^Once upon a time, there was a little" "$TMP/out"

# sampling: same seed, same text; another seed, another text
"$M" run --temp 1 --top-p 0.9 --seed 42 -n 64 -t 1 > "$TMP/a" 2>/dev/null
"$M" run --temp 1 --top-p 0.9 --seed 42 -n 64 -t 1 > "$TMP/b" 2>/dev/null
"$M" run --temp 1 --top-p 0.9 --seed 43 -n 64 -t 1 > "$TMP/c" 2>/dev/null
cmp -s "$TMP/a" "$TMP/b" && ok || bad "same seed gave different text"
cmp -s "$TMP/a" "$TMP/c" && bad "different seeds gave the same text" || ok

# bad input
expect_status 1 "$M" run -m /nonexistent.gguf
# --gpus never falls back to the CPU quietly
expect_status 1 "$M" run --gpus 2 --backend cpu -n 2
expect_grep "needs --backend cuda" "$TMP/err"
expect_status 2 "$M" run --gpus 0 -n 2
expect_status 2 "$M" run --temp abc
expect_status 2 "$M" run --top-p 2
expect_status 2 "$M" run -t 0
python_free_long=$(head -c 4000 /dev/zero | tr '\0' 'a')
expect_status 1 "$M" run -p "$python_free_long" -c 64
expect_grep "context" "$TMP/err"
printf 'bad \xff\xfe utf8 \xc3' > "$TMP/bad.txt"
expect_status 0 "$M" run -f "$TMP/bad.txt" -n 5 -t 1
expect_status 1 "$M" run -f /nonexistent.txt
finish
