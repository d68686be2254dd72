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
# --verbose names the backend on stderr (CUDA adds its device line)
expect_status 0 "$M" run -p "Once" --temp 0 -n 2 -t 1 --backend cpu --verbose
expect_grep "^muser: backend cpu" "$TMP/err"
# --gpu-mem takes binary sizes; anything else is a usage error naming the option
expect_status 2 "$M" run -p "Once" -n 2 --gpu-mem 24X
expect_grep "gpu-mem takes a size" "$TMP/err"

# llama.cpp's long option names
expect_status 0 "$M" run --model "$SRC/models/stories260K/stories260K.gguf" --ctx-size 64 --threads 1 --batch-size 8 \
  --n-predict 3 --temp 0 --prompt "Once"
expect_grep "decode: 3 tokens" "$TMP/err"
printf 'Once upon' > "$TMP/prompt.txt"
expect_status 0 "$M" run --file "$TMP/prompt.txt" -n 1 --temp 0 -t 1
expect_grep "^Once upon" "$TMP/out"
expect_grep "prompt: 3 tokens, .* | decode: 1 token, " "$TMP/err"
expect_status 2 "$M" run -p "Once" -f "$TMP/prompt.txt"
expect_grep "not both" "$TMP/err"
expect_status 2 "$M" run -n 2 extra
expect_grep "unexpected argument 'extra'" "$TMP/err"
expect_status 0 "$M" run -n 2 -t 1000
expect_grep "run: -t 1000 is more than the $(nproc) cores\? online; using $(nproc)" "$TMP/err"

# no --seed: a random seed, printed with the timings; --seed with it repeats the text
expect_status 0 "$M" run --temp 1 -n 48 -t 1
seed=$(sed -n 's/.*| seed \([0-9]*\)$/\1/p' "$TMP/err")
cp "$TMP/out" "$TMP/random_run"
[ -n "$seed" ] && ok || bad "no seed printed: $(cat "$TMP/err")"
expect_status 0 "$M" run --temp 1 -n 48 -t 1 --seed "${seed:-0}"
cmp -s "$TMP/out" "$TMP/random_run" && ok || bad "--seed $seed did not repeat the run"
expect_grep "| seed $seed$" "$TMP/err"
s1=$seed
"$M" run --temp 1 -n 4 -t 1 > /dev/null 2> "$TMP/err2"
s2=$(sed -n 's/.*| seed \([0-9]*\)$/\1/p' "$TMP/err2")
[ "$s1" != "$s2" ] && ok || bad "two runs without --seed drew the same seed $s1"

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
# text that is not UTF-8 is refused, never turned into U+FFFD
printf 'bad \xff\xfe utf8 \xc3' > "$TMP/bad.txt"
expect_status 1 "$M" run -f "$TMP/bad.txt" -n 5 -t 1
expect_grep "bad.txt is not valid UTF-8 (byte 4 is 0xff)" "$TMP/err"
expect_status 1 "$M" run -p "$(printf 'caf\xc3')" -n 5 -t 1
expect_grep "the prompt is not valid UTF-8 (byte 3 is 0xc3)" "$TMP/err"
expect_status 0 "$M" run -p "café ☕" -n 2 -t 1
expect_status 1 "$M" run -f /nonexistent.txt
expect_grep "cannot open /nonexistent.txt: No such file or directory" "$TMP/err"
expect_status 1 "$M" run -f "$TMP"
expect_grep "cannot read .*: it is a directory" "$TMP/err"

# -n -1 runs to a full context: -c, else the file's (models/README.md says which it is for stories260K)
expect_status 0 "$M" run -n -1 -c 300 --temp 0 -t 1
expect_grep "the context is full (300 tokens)" "$TMP/err"
ctx=$("$M" inspect "$SRC/models/stories260K/stories260K.gguf" | sed -n 's/.*n_ctx_train \([0-9]*\)$/\1/p')
grep -q "the file says $ctx (" "$SRC/models/README.md" && ok || bad "models/README.md does not give the file's context ($ctx)"

# Ctrl-C stops the generation cleanly: the text so far, the timing line, exit status 130
"$M" run -m "$DATA/fixtures/nano/nano-Q8_0.gguf" --backend ref -n -1 -t 1 -p "Once" > "$TMP/int_out" 2> "$TMP/int_err" &
pid=$!
for _ in $(seq 600); do [ -s "$TMP/int_out" ] && break; sleep 0.05; done
kill -INT "$pid"
wait "$pid"
rc=$?
[ "$rc" = 130 ] && ok || bad "Ctrl-C: exit $rc (want 130): $(cat "$TMP/int_err")"
expect_grep "muser run: interrupted" "$TMP/int_err"
expect_grep "| decode: [0-9]* tokens\?, .* | seed [0-9]*$" "$TMP/int_err"
finish
