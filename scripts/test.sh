#!/usr/bin/env bash
# The whole test suite, as CI runs it: install missing packages, build with
# warnings as errors, run every test; then again under AddressSanitizer and
# UndefinedBehaviorSanitizer (both suites replay the fuzz corpora); then the
# fuzz targets for a bounded time (MUSER_FUZZ_SECONDS in all, default 180).
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

echo "== fuzzing (bounded: ${MUSER_FUZZ_SECONDS:-180} s shared by the targets)"
scripts/fuzz.sh --ci "${MUSER_FUZZ_SECONDS:-180}"
echo "== all tests passed"
