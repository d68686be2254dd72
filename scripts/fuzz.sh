#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz/fuzz_*.c) from their corpora in
# tests/fuzz/corpus/<target>, one after the other, and prints executions,
# coverage and crashes per target.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   SECONDS per target (default 60);
#       then each corpus is merged back: a fresh -merge=1 keeps the inputs
#       that add coverage, and every named input (seeds, regressions) stays.
#       An input that crashed, leaked, hit undefined behaviour or timed out
#       is copied into the corpus as regress-<kind>-<sha1>: ctest's
#       fuzz_replay_<target> then fails until it is fixed.
#   scripts/fuzz.sh --ci [SECONDS] [TARGET...]   SECONDS in all (default
#       180), divided among the targets; the corpora are left as they are.
#   scripts/fuzz.sh --long [SECONDS] [TARGET...]   each target until 10
#       million executions or SECONDS (default 1800), whichever comes first;
#       merged back as without a mode.
#
# Inputs named by their SHA-1 alone are the fuzzer's own and may be pruned
# by a later merge. Exits non-zero when any target failed.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=0
runs=()
case "${1:-}" in
  --ci) ci=1; shift ;;
  --long) runs=(-runs=10000000); shift ;;
esac
default=60
[ $ci = 1 ] && default=180
[ ${#runs[@]} -gt 0 ] && default=1800
# SECONDS may be left out before the targets
seconds=$default
if [[ ${1:-} =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do
    t=$(basename "$f" .c)
    targets+=("${t#fuzz_}")
  done
fi
[ $ci = 1 ] && seconds=$(( seconds / ${#targets[@]} > 1 ? seconds / ${#targets[@]} : 1 ))

# Largest input per target: model files need room; text inputs stay short
# so that a corpus stays small and an execution fast.
max_len() {
  case "$1" in
    model) echo 16384 ;;
    gguf) echo 16384 ;;
    *) echo 8192 ;;
  esac
}

build=build-fuzz
CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMUSER_FUZZ=ON -DMUSER_CUDA=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
summary=()
for t in "${targets[@]}"; do
  corpus=tests/fuzz/corpus/$t
  mkdir -p "$corpus"
  work=$out/$t-work
  artifacts=$out/$t-artifacts/
  mkdir -p "$work" "$artifacts"
  cp -r "$corpus"/. "$work"/
  log=$out/$t.log
  echo "-- fuzz_$t: $seconds s ${runs[*]}"
  rc=0
  start=$(date +%s)
  "$build/fuzz_$t" "${runs[@]}" -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=25 -report_slow_units=25 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts" "$work" >"$log" 2>&1 || rc=$?
  wall=$(( $(date +%s) - start ))
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)
  rate=$(awk '/stat::average_exec_per_sec/ {print $2}' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
  found=$(find "$artifacts" -type f | wc -l)
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    failed=1
    grep -E 'ERROR|runtime error|SUMMARY|deadly|Test unit written' "$log" | head -20 || true
    tail -n 40 "$log"
    for a in "$artifacts"*; do
      [ -f "$a" ] || continue
      name=$(basename "$a")
      kind=${name%%-*}
      echo "failing input ($name), base64: $(base64 -w0 "$a")"
      if [ $ci = 0 ]; then
        cp "$a" "$corpus/regress-$kind-$(sha1sum "$a" | cut -c1-40)"
        echo "kept as $corpus/regress-$kind-$(sha1sum "$a" | cut -c1-40)"
      fi
    done
  fi
  before=$(find "$corpus" -type f | wc -l)
  after=$before
  if [ $ci = 0 ]; then
    fresh=$out/$t-merged
    mkdir -p "$fresh"
    # -use_counters=0: an input stays for an edge it alone covers, not for
    # hitting a known edge more often (a corpus of hundreds, not thousands)
    "$build/fuzz_$t" -merge=1 -use_counters=0 -max_len="$(max_len "$t")" -timeout=25 -rss_limit_mb=2048 \
      "$fresh" "$corpus" "$work" \
      >"$out/$t.merge.log" 2>&1 || { echo "merge of $t failed:"; tail -n 20 "$out/$t.merge.log"; failed=1; continue; }
    # named inputs stay (a merged copy of one is dropped); hash-named ones are replaced
    for f in "$corpus"/*; do
      name=$(basename "$f")
      if ! [[ $name =~ ^[0-9a-f]{40}$ ]]; then
        rm -f "$fresh/$(sha1sum "$f" | cut -c1-40)"
      else
        rm -f "$f"
      fi
    done
    cp "$fresh"/* "$corpus"/ 2>/dev/null || true
    after=$(find "$corpus" -type f | wc -l)
  fi
  line=$(printf '%-10s %12s execs %5d s %7s/s  %-22s crashes %d  corpus %d -> %d (%s)' "$t" "${execs:-?}" "$wall" "${rate:-?}" \
    "${cov:-cov: ?}" "$found" "$before" "$after" "$(du -sh "$corpus" | cut -f1)")
  echo "$line"
  summary+=("$line")
done
echo "== fuzzing summary ($seconds s per target)"
printf '%s\n' "${summary[@]}"
exit $failed
