#!/usr/bin/env bash
# Configures and builds Muser into build/ (Release, warnings as errors).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMUSER_WERROR=ON >/dev/null
cmake --build build -j"$(nproc)"
