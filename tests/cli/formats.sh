#!/usr/bin/env bash
# CLI tests of the exact-only formats (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
# IQ4_NL, IQ4_XS) and the Q3_K_M mix: `muser quantize` writes them, inspect
# names them, and the CPU engine (decode and prefill, both lanes) matches
# the float64 reference on the same file within the core bound.
. "$(dirname "$0")/lib.sh"
NANO=$DATA/fixtures/nano

expect_status 0 "$M" synth --preset nano --mix f32 -o "$TMP/f32.gguf"
check_parity() { # FILE MODE LANE
  expect_status 0 "$M" parity -m "$1" --tokens "$NANO/tokens.txt" --ref float64 --kv f32 --mode "$2" --lane "$3" --json
  local max top
  max=$(sed 's/.*"max_abs": \([^,]*\),.*/\1/' "$TMP/out")
  top=$(sed 's/.*"top1_decisive": \([^}]*\)}.*/\1/' "$TMP/out")
  awk -v m="$max" 'BEGIN { exit !(m <= 5e-4) }' && ok || bad "$1 $2 $3: max_abs $max > 5e-4"
  [ "$top" = 1 ] && ok || bad "$1 $2 $3: decisive top-1 $top"
}
for t in Q4_1 Q5_0 Q5_1 Q2_K Q3_K IQ4_NL IQ4_XS; do
  lower=$(echo "$t" | tr 'A-Z' 'a-z')
  expect_status 0 "$M" quantize "$TMP/f32.gguf" "$TMP/$lower.gguf" "$lower"
  expect_status 0 "$M" inspect "$TMP/$lower.gguf"
  expect_grep "| $t | 66 |" "$TMP/out"   # every 2-D tensor
  check_parity "$TMP/$lower.gguf" decode exact
  check_parity "$TMP/$lower.gguf" prefill fast
done

# Q3_K_M: Q3_K with llama.cpp's Q4_K/Q5_K attn_v, attn_output, ffn_down and a Q6_K output
expect_status 0 "$M" quantize "$TMP/f32.gguf" "$TMP/q3km.gguf" q3_k_m
expect_status 0 "$M" inspect "$TMP/q3km.gguf"
# 8 layers: attn_v of layers 0-1 Q5_K; attn_v 2-7, attn_output and ffn_down Q4_K (6 + 8 + 8)
expect_grep "| blk.0.attn_v.weight | Q5_K |" "$TMP/out"
expect_grep "| Q5_K | 2 |" "$TMP/out"
expect_grep "| Q4_K | 22 |" "$TMP/out"
expect_grep "| Q6_K | 1 |" "$TMP/out"
expect_grep "| Q3_K | 41 |" "$TMP/out"
check_parity "$TMP/q3km.gguf" decode exact

# generation runs end to end on one of them
expect_status 0 "$M" run -m "$TMP/q3_k.gguf" -p "hello" -n 8 --temp 0
[ -s "$TMP/out" ] && ok || bad "run on Q3_K printed nothing"
finish
