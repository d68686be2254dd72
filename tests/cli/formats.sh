#!/usr/bin/env bash
# CLI tests of the integer-view formats added after the core set (Q4_1,
# Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS) and the Q3_K_M mix: `muser
# quantize` writes them, inspect names them, the exact lane matches the
# float64 reference on the same file within the core bound, and the fast
# lane (int8 activations) stays within 1.5x the mean KL that Q4_0's fast
# lane, an established format, shows against its own float64 reference.
. "$(dirname "$0")/lib.sh"
NANO=$DATA/fixtures/nano

expect_status 0 "$M" synth --preset nano --mix f32 -o "$TMP/f32.gguf"
# the fixture's 160 tokens; under the sanitizers (MUSER_TEST_QUICK) the
# first 48, which still wrap the 32-row sliding rings (the float64
# reference's time dominates)
TOKENS="$NANO/tokens.txt"
if [ -n "${MUSER_TEST_QUICK:-}" ]; then
  tr -s ' \n' '\n' <"$NANO/tokens.txt" | head -48 | tr '\n' ' ' >"$TMP/tokens.txt"
  TOKENS="$TMP/tokens.txt"
fi
parity_json() { # FILE MODE LANE
  expect_status 0 "$M" parity -m "$1" --tokens "$TOKENS" --ref float64 --kv f32 --mode "$2" --lane "$3" --json
}
json_field() { sed "s/.*\"$1\": \([^,}]*\).*/\1/" "$TMP/out"; }
check_parity() { # FILE MODE LANE
  parity_json "$@"
  local max top
  max=$(json_field max_abs)
  top=$(json_field top1_decisive)
  awk -v m="$max" 'BEGIN { exit !(m <= 5e-4) }' && ok || bad "$1 $2 $3: max_abs $max > 5e-4"
  [ "$top" = 1 ] && ok || bad "$1 $2 $3: decisive top-1 $top"
}
# the yardstick: Q4_0's fast lane against its own float64 reference
expect_status 0 "$M" quantize "$TMP/f32.gguf" "$TMP/q4_0.gguf" q4_0
parity_json "$TMP/q4_0.gguf" prefill fast
KL_Q4_0=$(json_field mean_kl)
check_fast() { # FILE
  parity_json "$1" prefill fast
  local kl top
  kl=$(json_field mean_kl)
  top=$(json_field top1_decisive)
  awk -v k="$kl" -v y="$KL_Q4_0" 'BEGIN { exit !(k > 0 && k <= 1.5 * y) }' && ok ||
    bad "$1 prefill fast: mean KL $kl against Q4_0's $KL_Q4_0"
  [ "$top" = 1 ] && ok || bad "$1 prefill fast: decisive top-1 $top"
}
for t in Q4_1 Q5_0 Q5_1 Q2_K Q3_K IQ4_NL IQ4_XS; do
  lower=$(echo "$t" | tr 'A-Z' 'a-z')
  expect_status 0 "$M" quantize "$TMP/f32.gguf" "$TMP/$lower.gguf" "$lower"
  expect_status 0 "$M" inspect "$TMP/$lower.gguf"
  expect_grep "| $t | 66 |" "$TMP/out"   # every 2-D tensor
  check_parity "$TMP/$lower.gguf" decode exact
  check_fast "$TMP/$lower.gguf"
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
