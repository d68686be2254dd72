#!/usr/bin/env bash
# CLI tests of the core commands: help, inspect, parity (text and JSON),
# route logging, synth, quantize, and bad input of every kind.
. "$(dirname "$0")/lib.sh"
NANO=$DATA/fixtures/nano

expect_status 0 "$M" --help
expect_status 2 "$M"
expect_status 2 "$M" no-such-command
expect_grep "unknown command" "$TMP/err"

expect_status 0 "$M" inspect "$NANO/nano-Q8_0.gguf"
expect_grep "layer kinds: S S S F S S S F" "$TMP/out"
expect_grep "Bytes read per decoded token" "$TMP/out"
expect_status 2 "$M" inspect

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

# quantize: f32 -> q8_0 gives a loadable model close to the original
expect_status 0 "$M" synth --preset nano --mix f32 -o "$TMP/f32.gguf"
expect_status 0 "$M" quantize "$TMP/f32.gguf" "$TMP/q8.gguf" q8_0
expect_status 0 "$M" inspect "$TMP/q8.gguf"
expect_grep "| Q8_0 | 66 |" "$TMP/out"
expect_status 1 "$M" quantize "$TMP/q8.gguf" "$TMP/q4.gguf" q4_k_m   # input must be float
expect_status 2 "$M" quantize "$TMP/f32.gguf" "$TMP/q4.gguf" q9_z

# bad input: clear errors, never a crash
expect_status 1 "$M" inspect /nonexistent.gguf
expect_grep "cannot open" "$TMP/err"
head -c 3000 "$NANO/nano-Q8_0.gguf" > "$TMP/trunc.gguf"
expect_status 1 "$M" inspect "$TMP/trunc.gguf"
expect_grep "invalid GGUF" "$TMP/err"
expect_status 1 "$M" parity -m "$TMP/trunc.gguf" --tokens "$NANO/tokens.txt" --ref float64
head -c 4000000 "$NANO/nano-Q8_0.gguf" > "$TMP/trunc2.gguf"   # header intact, data cut
expect_status 1 "$M" parity -m "$TMP/trunc2.gguf" --tokens "$NANO/tokens.txt" --ref float64
expect_grep "outside" "$TMP/err"
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
finish
