#!/usr/bin/env bash
# Configures and builds Muser into build/ (Release, warnings as errors);
# with MUSER_DEV=ON also the kernel lab in dev/ (the test suite builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMUSER_WERROR=ON -DMUSER_DEV="${MUSER_DEV:-OFF}" >/dev/null
cmake --build build -j"$(nproc)"
