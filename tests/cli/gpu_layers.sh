#!/usr/bin/env bash
# --gpu-layers N (-ngl, --n-gpu-layers) through the commands. Without a
# GPU: the option's values and its errors (usage errors exit 2 naming the
# option; with --backend cpu or with --gpus the session refuses it), and
# -ngl 0 with --backend cuda runs every layer on the CPU (the text of
# --backend cpu in the GPU's default lane, fast). With a GPU (else the
# rest is skipped, 77): run at every split N = 0 .. L in the exact lane
# with f32 KV prints the greedy text of the CPU and of the GPU where those
# two agree (a near tie may part them: then it is printed, not failed);
# --verbose and bench name the split; auto picks every layer without a cap
# and none under a cap below the reserve (then the CPU runs), and -ngl all
# under that cap fails with the plan's message.
. "$(dirname "$0")/lib.sh"
"$M" synth --preset nano --ctx 2048 -o "$TMP/nano.gguf" 2>/dev/null || { bad "synth failed"; finish; exit 1; }
L=$("$M" inspect "$TMP/nano.gguf" 2>/dev/null | awk '/block_count/ {print $NF; exit}')
[ -n "$L" ] && [ "$L" -gt 1 ] && ok || bad "no layer count from inspect: '$L'"
P="The quick brown fox jumps over the lazy dog, and then the dog wakes up and runs after the fox."
R=(run -m "$TMP/nano.gguf" -p "$P" --temp 0 -n 40)

# the help names it
"$M" run --help > "$TMP/help" 2>&1
expect_grep "-ngl, --gpu-layers N|auto" "$TMP/help"
# values: a count, all, auto; anything else is a usage error naming the option
for v in -1 x 1.5 "" " 2" Auto; do
  expect_status 2 "$M" "${R[@]}" -ngl "$v"
  expect_grep "takes a number of layers (0 or more), all or auto, not '$v'" "$TMP/err"
done
expect_status 2 "$M" "${R[@]}" --gpu-layers
expect_grep "needs a value" "$TMP/err"
expect_status 2 "$M" bench -m "$TMP/nano.gguf" --n-gpu-layers many
expect_grep "--n-gpu-layers takes a number of layers" "$TMP/err"
# the session refuses it where no GPU would run a layer
expect_status 1 "$M" "${R[@]}" --backend cpu -ngl 4
expect_grep "--gpu-layers 4 says how many layers run on the GPU and needs --backend cuda (or auto), not cpu" "$TMP/err"
expect_status 1 "$M" "${R[@]}" --backend ref --gpu-layers auto
expect_grep "not ref" "$TMP/err"
expect_status 1 "$M" "${R[@]}" --gpus 2 -ngl 2
expect_grep "does not combine with --gpus 2" "$TMP/err"
# -ngl 0: every layer on the CPU, in the lane the GPU session would take
expect_status 0 "$M" "${R[@]}" --backend cuda -ngl 0 --verbose
cp "$TMP/out" "$TMP/ngl0"
expect_grep "backend cpu" "$TMP/err"
expect_status 0 "$M" "${R[@]}" --backend cpu --lane fast
cmp -s "$TMP/out" "$TMP/ngl0" && ok || bad "-ngl 0 --backend cuda differs from --backend cpu --lane fast"

if ! "$M" run -m "$TMP/nano.gguf" --backend cuda -p "Hi" -n 1 > "$TMP/out" 2> "$TMP/err"; then
  echo "SKIPPED (the GPU part): no usable GPU: $(tail -n 1 "$TMP/err")"
  finish || exit 1
  exit 77
fi

# every split, exact lane, f32 KV
X=(--backend cuda --lane exact --kv f32)
"$M" "${R[@]}" --backend cpu --lane exact --kv f32 > "$TMP/cpu" 2>/dev/null
"$M" "${R[@]}" "${X[@]}" > "$TMP/gpu" 2>/dev/null
for n in $(seq 0 "$L"); do
  expect_status 0 "$M" "${R[@]}" "${X[@]}" -ngl "$n"
  if cmp -s "$TMP/cpu" "$TMP/gpu"; then
    cmp -s "$TMP/out" "$TMP/cpu" && ok || bad "-ngl $n: the greedy text differs from the CPU's and the GPU's"
  else
    echo "CPU and GPU texts differ (a near tie); -ngl $n: $(cmp -s "$TMP/out" "$TMP/cpu" && echo CPU's || echo other)"
  fi
done
# the fast lane (the GPU's default) runs at a split too, and chat keeps its turns on both sides
H=$((L / 2))
expect_status 0 "$M" "${R[@]}" --backend cuda -ngl "$H"
printf 'Hello there\nAnd then?\n' | "$M" chat -m "$TMP/nano.gguf" "${X[@]}" -ngl "$H" --temp 0 -n 16 > "$TMP/c1" 2>/dev/null \
  && ok || bad "chat -ngl $H failed"
printf 'Hello there\nAnd then?\n' | "$M" chat -m "$TMP/nano.gguf" --backend cpu --lane exact --kv f32 --temp 0 -n 16 \
  > "$TMP/c2" 2>/dev/null
cmp -s "$TMP/c1" "$TMP/c2" && ok || echo "chat -ngl $H: answers differ from the CPU's (a near tie?)"

# --verbose and bench name the split
expect_status 0 "$M" "${R[@]}" --backend cuda -ngl "$H" --verbose
expect_grep "layers split: the embedding and layers 0-$((H - 1)) on the GPU, layers $H-$((L - 1)) and the output head on the CPU (-ngl $H of $L" "$TMP/err"
expect_grep "layers 0-$((H - 1)) of $L, no head" "$TMP/err"
expect_status 0 "$M" bench -m "$TMP/nano.gguf" --backend cuda -ngl "$H" --depths 0,64 -n 3 --pp 32
expect_grep "^- device: layers split: .*(-ngl $H of $L" "$TMP/out"
expect_grep "^| 64 | " "$TMP/out"
expect_status 0 "$M" bench -m "$TMP/nano.gguf" --backend cuda -ngl "$H" --parallel 1,3 -n 3
expect_grep "^| 0 | 3 | " "$TMP/out"

# auto: all without a cap; none under 100M (below the reserve), then the CPU
expect_status 0 "$M" "${R[@]}" --backend cuda --lane exact --kv f32 -ngl auto
expect_grep "gpu-layers auto: $L of $L layers and the head fit on the GPU" "$TMP/err"
cmp -s "$TMP/out" "$TMP/gpu" && ok || bad "-ngl auto without a cap differs from the GPU's text"
expect_status 0 "$M" "${R[@]}" --backend cuda -ngl auto --gpu-mem 100M
expect_grep "gpu-layers auto: 0 of $L layers fit on the GPU; running on the CPU" "$TMP/err"
expect_status 1 "$M" "${R[@]}" --backend cuda -ngl all --gpu-mem 100M
expect_grep "not enough GPU memory" "$TMP/err"
finish
