#!/usr/bin/env bash
# `muser bench` on a tiny synthetic model: the JSON shape (one object with
# decode[], prefill{} and membw_gb_s), the Markdown report, --profile,
# --plot, --membw, and clear errors for bad input. Speeds are not checked:
# benchmarks are never timed tests.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || { echo "SKIPPED: jq is not installed (scripts/deps.sh installs it)"; exit 77; }

"$M" synth --preset nano -o "$TMP/nano.gguf" >/dev/null 2>&1 && ok || bad "synth nano failed"
B=("$M" bench -m "$TMP/nano.gguf" --membw-mib 64 -t 2)

# JSON: exactly one object of the documented shape
expect_status 0 "${B[@]}" --depths 0,16,900 -n 3 --pp 8 --json
jq -e -s 'length == 1' "$TMP/out" >/dev/null && ok || bad "--json did not print exactly one JSON object: $(head -c 300 "$TMP/out")"
cp "$TMP/out" "$TMP/bench.json"
jq -e '(.decode | type == "array" and length == 3)
       and ([.decode[].depth] == [0, 16, 900])
       and all(.decode[]; (.tok_s > 0) and (.ms_per_token > 0) and (.bytes_per_token > 0) and (.gb_s > 0)
                          and (.bw_share > 0))
       and (.prefill.tokens == 8) and (.prefill.tok_s > 0)
       and (.membw_gb_s > 0)' "$TMP/bench.json" >/dev/null && ok || bad "JSON shape: $(cat "$TMP/bench.json")"
# bytes per token grow with the KV read at depth
jq -e '.decode[2].bytes_per_token > .decode[0].bytes_per_token' "$TMP/bench.json" >/dev/null && ok || bad "bytes/token ignore depth"

# default depths: those the model reaches (nano's context is 1024: 0, 512, and its last
# position, measured n + 1 earlier), and -p (llama-bench's name) for --pp
expect_status 0 "${B[@]}" -n 2 -p 8 --json
jq -e '[.decode[].depth] == [0, 512, 1021] and .prefill.tokens == 8' "$TMP/out" >/dev/null && ok \
  || bad "default depths: $(cat "$TMP/out")"

# Markdown, the profile table, the fast lane
expect_status 0 "${B[@]}" --depths 0,64 -n 2 --pp 0 --profile --lane fast
expect_grep "| depth | tok/s | ms/token | bytes/token | GB/s" "$TMP/out"
expect_grep "random finite K/V" "$TMP/out"
expect_grep "lane fast" "$TMP/out"
expect_grep "| op family | calls | bytes | ms | GB/s | share of the token |" "$TMP/out"
expect_grep "| attention (KV read) |" "$TMP/out"
expect_grep "parallel region" "$TMP/out"

# --plot writes a PNG with gnuplot
if command -v gnuplot >/dev/null; then
  expect_status 0 "${B[@]}" --depths 0,32,128 -n 2 --pp 0 --plot "$TMP/plot.png"
  head -c 8 "$TMP/plot.png" | od -An -tx1 | grep -q "89 50 4e 47" && ok || bad "--plot did not write a PNG"
fi

# --membw alone needs no model
expect_status 0 "$M" bench --membw --membw-mib 64 -t 1
expect_grep "memory read bandwidth" "$TMP/out"
expect_status 0 "$M" bench --membw --membw-mib 64 --json
jq -e '.membw_gb_s > 0' "$TMP/out" >/dev/null && ok || bad "--membw --json: $(cat "$TMP/out")"

# --parallel: one row per width and depth, the JSON "parallel" array
expect_status 0 "${B[@]}" --parallel 1,2,4,8,16,32,64 -n 2 --lane fast
expect_grep "| depth | B | step ms | x one-row step | CPU ms | tok/s | bytes/step | GB/s" "$TMP/out"
[ "$(grep -c '^| 0 | [0-9]* |' "$TMP/out")" = 7 ] && ok || bad "--parallel: not one row per width: $(cat "$TMP/out")"
expect_status 0 "${B[@]}" --parallel 1,5,17 --depths 0,900 -n 2 --rounds 2 --json
jq -e -s 'length == 1' "$TMP/out" >/dev/null && ok || bad "--parallel --json did not print one JSON object"
jq -e '(.parallel | type == "array" and length == 6)
       and ([.parallel[].rows] == [1, 5, 17, 1, 5, 17]) and ([.parallel[].depth] == [0, 0, 0, 900, 900, 900])
       and all(.parallel[]; (.step_ms > 0) and (.step_cpu_ms >= 0) and (.tok_s > 0) and (.bytes_per_step > 0) and (.gb_s > 0)
                            and (.bw_share > 0) and (.membw_gb_s > 0) and (.vs_one_row > 0) and (.steps == 4))
       and (.parallel[3].bytes_per_step > .parallel[0].bytes_per_step)
       and (.parallel[5].bytes_per_step > .parallel[3].bytes_per_step)
       and (.rounds == 2) and (.threads == 2) and (.membw_gb_s > 0) and (.backend == "cpu")' "$TMP/out" >/dev/null \
  && ok || bad "--parallel JSON shape: $(cat "$TMP/out")"
# aggregate tok/s is B rows per step
jq -e 'all(.parallel[]; ((.tok_s * .step_ms / 1000 / .rows) - 1 | fabs) < 1e-6)' "$TMP/out" >/dev/null \
  && ok || bad "--parallel tok/s is not rows per step time"
for w in 0 -1 x 257 1,,2 "" 1,300; do
  expect_status 2 "${B[@]}" --parallel "$w"
  expect_grep "whole number from 1 to 256" "$TMP/err"
done
expect_status 2 "${B[@]}" --parallel 1,2 --profile
expect_grep "does not take" "$TMP/err"
expect_status 2 "${B[@]}" --rounds 2
expect_grep "needs --parallel" "$TMP/err"
expect_status 2 "${B[@]}" --parallel 2 --depths 1020 -n 8
expect_grep "do not fit in the model's context" "$TMP/err"

# bad input: clear messages, exit 2 for usage, 1 for what cannot run
expect_status 2 "${B[@]}" -t 0
expect_grep "at least one thread" "$TMP/err"
expect_status 2 "${B[@]}" -c 100
expect_grep "not a bench option" "$TMP/err"
expect_status 2 "${B[@]}" --depths 0,5000
expect_grep "beyond the model's context" "$TMP/err"
expect_status 2 "${B[@]}" --pp 4096
expect_grep "beyond the model's context" "$TMP/err"
expect_status 2 "${B[@]}" --lane turbo
expect_status 2 "${B[@]}" --depths 1,x
expect_status 2 "$M" bench
expect_grep "bench: -m MODEL (or --membw) is required" "$TMP/err"
expect_status 1 "$M" bench -m "$TMP/missing.gguf"
# a model larger than the machine's memory (a sparse file: no disk used)
mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
truncate -s "$(( (mem_kb + 1048576) * 1024 ))" "$TMP/huge.gguf"
expect_status 1 "$M" bench -m "$TMP/huge.gguf" --membw-mib 64
expect_grep "memory" "$TMP/err"
expect_grep "read from disk for every token" "$TMP/err"
rm -f "$TMP/huge.gguf"

finish
