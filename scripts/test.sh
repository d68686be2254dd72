#!/usr/bin/env bash
# The whole test suite, as CI runs it: install missing packages, build with
# warnings as errors, run every test; then again under AddressSanitizer and
# UndefinedBehaviorSanitizer; then the fuzz targets for a bounded time.
# Tests that need ../shared (MUSER_DATA_DIR) print SKIPPED when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
jobs=$(nproc)

echo "== npm packages for the server tests (tests/server/package-lock.json)"
(cd tests/server && npm ci --no-audit --no-fund --loglevel=error)

echo "== build (Release, -Werror, the kernel lab in dev/ too) and test"
MUSER_DEV=ON scripts/build.sh
(cd build && ctest --output-on-failure -j"$jobs" -LE cuda)

echo "== AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-O1 -g" -DMUSER_WERROR=ON \
  -DMUSER_SANITIZE=address,undefined -DMUSER_CUDA=OFF >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && MUSER_TEST_QUICK=1 ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" -LE "cuda|perf")

echo "== fuzzing (bounded)"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DMUSER_FUZZ=ON -DMUSER_CUDA=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target $(cd build-fuzz && make help | awk '/fuzz_/ {print $2}' | tr '\n' ' ')
for target in build-fuzz/fuzz_*; do
  name=$(basename "$target")
  corpus=tests/fuzz/corpus/${name#fuzz_}
  work=$(mktemp -d)
  cp -r "$corpus"/. "$work"/ 2>/dev/null || true
  echo "-- $name (${MUSER_FUZZ_SECONDS:-60} s)"
  "$target" -max_total_time="${MUSER_FUZZ_SECONDS:-60}" -max_len=65536 -rss_limit_mb=2048 -print_final_stats=1 "$work" 2>&1 | tail -4
  rm -rf "$work"
done
echo "== all tests passed"
