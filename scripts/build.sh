#!/usr/bin/env bash
# Configures and builds Muser into build/ (Release, warnings as errors);
# with MUSER_DEV=ON also the kernel lab in dev/ (the test suite builds it).
# The CUDA code is built for sm_80 and sm_90 only (MUSER_CUDA_ARCHS to
# change it): both sides of every Hopper guard compile, in well under half
# the time of the release set (all five GPUs + PTX, CMakeLists.txt), which
# would take CI on 2 cores from ~13 to ~22 minutes, near 30 when the
# machine is shared (docs/cuda.md has the times).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMUSER_WERROR=ON -DMUSER_DEV="${MUSER_DEV:-OFF}" \
  -DMUSER_CUDA_ARCHS="${MUSER_CUDA_ARCHS:-80-real;90-real}" >/dev/null
cmake --build build -j"$(nproc)"
