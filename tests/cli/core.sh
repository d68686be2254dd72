#!/usr/bin/env bash
# CLI tests of the core commands: help (with defaults), inspect, parity
# (text and JSON), route logging, synth, quantize (what each tensor
# became), option conventions, and bad input of every kind.
. "$(dirname "$0")/lib.sh"
NANO=$DATA/fixtures/nano

expect_status 0 "$M" --help
expect_status 0 "$M" -h
expect_grep "h, --help" "$TMP/out"
expect_status 0 "$M" help run
expect_grep "usage: muser run" "$TMP/out"
expect_status 2 "$M"
expect_status 2 "$M" no-such-command
expect_grep "unknown command" "$TMP/err"
expect_status 2 "$M" version extra
# every command's --help shows the defaults beside the options
for c in run chat tokenize parity inspect synth serve quantize bench; do
  expect_status 0 "$M" "$c" --help
  expect_grep "usage: muser $c" "$TMP/out"
done
"$M" run --help | grep -q -- "-n, --n-predict N .*(default: 256)" && ok || bad "run --help: no default beside -n"
"$M" run --help | grep -q -- "-c, --ctx-size N .*(default: the model's, at most 4096)" && ok || bad "run --help: -c default"
"$M" serve --help | grep -q -- "--port N .*(default: 8080)" && ok || bad "serve --help: --port default"
"$M" bench --help | grep -q -- "-n, --n-gen N .*(default: 16)" && ok || bad "bench --help: -n default"
# -t above the core count is capped, with a notice
cores=$(nproc)
expect_status 0 "$M" parity -m "$NANO/nano-Q8_0.gguf" --tokens "$NANO/tokens.txt" --ref "$NANO/nano-Q8_0.exact.f32" -t 1000 --json
expect_grep "muser parity: -t 1000 is more than the $cores cores\? online; using $cores" "$TMP/err"

expect_status 0 "$M" inspect "$NANO/nano-Q8_0.gguf"
expect_grep "layer kinds: S S S F S S S F" "$TMP/out"
expect_grep "Bytes read per decoded token" "$TMP/out"
expect_grep ", sliding window 32$" "$TMP/out"
# depths up to the model's context (1024): its last position ends the table
last_depth() { grep -B2 "^## GPU memory" "$1" | grep "^| " | tail -1; }
last_depth "$TMP/out" | grep -q "^| 1023 |" && ok || bad "inspect: the depth table does not end at 1023: $(last_depth "$TMP/out")"
# the GPU memory a session plans, a row per context up to the trained one, and a further session's (cuda_plan.c)
expect_grep "^## GPU memory (CUDA)" "$TMP/out"
tail -1 "$TMP/out" | grep -qE "^\| 1024 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$" && ok ||
    bad "inspect: the GPU memory table does not end at the context 1024: $(tail -1 "$TMP/out")"
expect_status 0 "$M" inspect -m "$NANO/nano-Q8_0.gguf"
expect_status 2 "$M" inspect
expect_grep "a MODEL file is required" "$TMP/err"
expect_status 2 "$M" inspect "$NANO/nano-Q8_0.gguf" "$NANO/nano-Q4_K_M.gguf"
expect_grep "unexpected argument '.*nano-Q4_K_M.gguf'" "$TMP/err"
# a llama model without sliding layers says so, and its depths stop at its context (2048)
STORIES=${MUSER_SRC:?}/models/stories260K/stories260K.gguf
expect_status 0 "$M" inspect "$STORIES"
expect_grep "no sliding-window layers" "$TMP/out"
grep -q "sliding window 0" "$TMP/out" && bad "inspect says 'sliding window 0'" || ok
last_depth "$TMP/out" | grep -q "^| 2047 |" && ok || bad "inspect stories260K: last depth $(last_depth "$TMP/out")"
grep -q "^| 8192 |" "$TMP/out" && bad "inspect shows a depth beyond the context" || ok

# parity: JSON has exactly the keys, and the exact lane meets the core bounds
expect_status 0 "$M" parity -m "$NANO/nano-Q8_0.gguf" --tokens "$NANO/tokens.txt" --ref "$NANO/nano-Q8_0.exact.f32" --kv f32 --json
expect_grep '^{"positions": 160, "max_abs": [0-9.e-]*, "rms": [0-9.e-]*, "mean_kl": [0-9.e-]*, "max_kl": [0-9.e-]*, "top1": 1, "top1_decisive": 1}$' "$TMP/out"
max=$(sed 's/.*"max_abs": \([^,]*\),.*/\1/' "$TMP/out")
awk -v m="$max" 'BEGIN { exit !(m <= 5e-4) }' && ok || bad "max_abs $max > 5e-4"
[ "$(wc -l < "$TMP/out")" = 1 ] && ok || bad "--json printed more than one line"

# routes: a small batch makes the SWA rings wrap, so both routes appear
MUSER_LOG_ROUTES=1 expect_status 0 "$M" parity -m "$NANO/nano-Q8_0.gguf" --tokens "$NANO/tokens.txt" --ref "$NANO/nano-Q8_0.exact.f32" -b 16
expect_grep "route=origin" "$TMP/err"
expect_grep "route=contiguous" "$TMP/err"
expect_grep 'why="visible span wraps the ring"' "$TMP/err"

# synth + parity against the float64 reference, prefill mode (40 tokens keep
# the float64 runs short under sanitizers)
head -c 160 "$NANO/tokens.txt" > "$TMP/tokens40.txt"
expect_status 0 "$M" synth --preset nano --mix q4_k_m --seed 3 -o "$TMP/nano.gguf"
expect_status 0 "$M" parity -m "$TMP/nano.gguf" --tokens "$TMP/tokens40.txt" --ref float64 --mode prefill --kv f32 --json
max=$(sed 's/.*"max_abs": \([^,]*\),.*/\1/' "$TMP/out")
awk -v m="$max" 'BEGIN { exit !(m <= 2e-4) }' && ok || bad "synth model vs float64: max_abs $max"
expect_status 2 "$M" synth --preset huge -o "$TMP/x.gguf"
expect_status 2 "$M" synth --preset nano --mix q9_z -o "$TMP/x.gguf"
expect_status 2 "$M" synth --preset nano
expect_grep "synth: -o FILE is required" "$TMP/err"
expect_status 2 "$M" synth -o "$TMP/x.gguf"
expect_grep "synth: --preset nano|micro|30b is required" "$TMP/err"
expect_status 1 "$M" synth --preset nano -o "$TMP/no/such/dir.gguf"
expect_grep "cannot create .*: No such file or directory" "$TMP/err"
expect_status 0 "$M" synth --preset nano --layers 1 -o "$TMP/one.gguf"
expect_grep "(.* 1 layer, mix f32; tensors: F32 17)" "$TMP/err"

# quantize: f32 -> q8_0 gives a loadable model close to the original
expect_status 0 "$M" synth --preset nano --mix f32 -o "$TMP/f32.gguf"
expect_status 0 "$M" quantize "$TMP/f32.gguf" "$TMP/q8.gguf" q8_0
expect_status 0 "$M" inspect "$TMP/q8.gguf"
expect_grep "| Q8_0 | 66 |" "$TMP/out"
expect_status 1 "$M" quantize "$TMP/q8.gguf" "$TMP/q4.gguf" q4_k_m   # input must be float
expect_status 2 "$M" quantize "$TMP/f32.gguf" "$TMP/q4.gguf" q9_z
expect_status 2 "$M" quantize "$TMP/f32.gguf" "$TMP/q4.gguf"
expect_grep "TYPE is required" "$TMP/err"
expect_status 2 "$M" quantize "$TMP/f32.gguf" "$TMP/q4.gguf" q4_k 1 extra
expect_grep "unexpected argument 'extra'" "$TMP/err"
expect_status 0 "$M" quantize "$TMP/f32.gguf" "$TMP/q4.gguf" q4_k 1   # llama-quantize's trailing thread count
expect_grep "tensors: F32 49, Q4_K 65, Q6_K 1;" "$TMP/err"
# rows that do not fit the type's blocks: each such tensor named with what it became and why, the
# summary counts the types actually written, and inspect agrees
expect_status 0 "$M" quantize "$STORIES" "$TMP/s-q4k.gguf" q4_k
expect_grep "blk.0.attn_q.weight is Q8_0, not Q4_K: its rows of 64 are not a multiple of Q4_K's 256-value blocks$" "$TMP/err"
expect_grep "blk.4.ffn_down.weight is F16, not Q4_K: its rows of 172 are not a multiple of Q4_K's 256-value blocks (nor of Q8_0's 32)" "$TMP/err"
expect_grep "wrote .*s-q4k.gguf (q4_k; tensors: F32 11, F16 5, Q8_0 32;" "$TMP/err"
expect_grep "output.weight is Q8_0, not Q6_K" "$TMP/err"   # (the q4_k mix's output rule)
[ "$(grep -c ", not Q[46]_K: its rows" "$TMP/err")" = 37 ] && ok || bad "quantize did not name the 37 tensors that fell back"
expect_status 0 "$M" inspect "$TMP/s-q4k.gguf"
expect_grep "| Q8_0 | 32 |" "$TMP/out"
expect_grep "| F16 | 5 |" "$TMP/out"

# bad input: clear errors, never a crash
expect_status 1 "$M" inspect /nonexistent.gguf
expect_grep "cannot open" "$TMP/err"
expect_status 1 "$M" inspect "$TMP"
expect_grep "is a directory" "$TMP/err"
head -c 3000 "$NANO/nano-Q8_0.gguf" > "$TMP/trunc.gguf"
expect_status 1 "$M" inspect "$TMP/trunc.gguf"
expect_grep "invalid GGUF.*truncated" "$TMP/err"
head -c 20 "$NANO/nano-Q8_0.gguf" > "$TMP/trunc0.gguf"
expect_status 1 "$M" inspect "$TMP/trunc0.gguf"
expect_grep "the file is truncated" "$TMP/err"
expect_status 1 "$M" parity -m "$TMP/trunc.gguf" --tokens "$NANO/tokens.txt" --ref float64
head -c 4000000 "$NANO/nano-Q8_0.gguf" > "$TMP/trunc2.gguf"   # header intact, data cut
expect_status 1 "$M" parity -m "$TMP/trunc2.gguf" --tokens "$NANO/tokens.txt" --ref float64
expect_grep "outside.*truncated" "$TMP/err"
expect_status 2 "$M" parity -m "$NANO/nano-Q8_0.gguf" --ref float64
expect_grep "tokens FILE is required" "$TMP/err"
head -c 100000 /dev/urandom > "$TMP/random.gguf"
expect_status 1 "$M" inspect "$TMP/random.gguf"
echo "1 2 99999" > "$TMP/bad_tokens.txt"
expect_status 1 "$M" parity -m "$NANO/nano-Q8_0.gguf" --tokens "$TMP/bad_tokens.txt" --ref float64
expect_grep "outside the vocabulary" "$TMP/err"
echo "1 2 x" > "$TMP/bad_tokens2.txt"
expect_status 1 "$M" parity -m "$NANO/nano-Q8_0.gguf" --tokens "$TMP/bad_tokens2.txt" --ref float64
expect_status 1 "$M" parity -m "$NANO/nano-Q8_0.gguf" --tokens "$NANO/tokens.txt" --ref "$NANO/nano-Q8_0.exact.f32" -c 100
expect_grep "context" "$TMP/err"
expect_status 2 "$M" parity -m "$NANO/nano-Q8_0.gguf" --tokens "$NANO/tokens.txt" --ref float64 -t 0
expect_status 1 "$M" parity -m "$NANO/nano-Q8_0.gguf" --tokens "$NANO/tokens.txt" --ref "$NANO/tokens.txt"
# the CUDA backend's libraries are loaded when a CUDA session opens, never
# at start: the command itself links none of cuBLAS (it maps hundreds of MB)
if command -v ldd >/dev/null; then
  ldd "$M" >"$TMP/ldd" 2>&1
  grep -q libcublas "$TMP/ldd" && bad "muser links cuBLAS at start: $(grep libcublas "$TMP/ldd")" || ok
fi
finish
