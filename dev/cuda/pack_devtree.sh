#!/usr/bin/env bash
# pack_devtree.sh — builds what dev/cuda/device_run.sh runs on the GPU
# machine and packs it into .devtree/ (ignored by git; the device call
# names it in `carry`): new.tar (libmuser_core.so, muser and the CUDA
# tests) and lib/ (the shared libraries a bare GPU machine lacks).
#   [ARCHS=90-real] [BUILD=build-device] bash dev/cuda/pack_devtree.sh
# ARCHS: the CUDA targets (MUSER_CUDA_ARCHS); the H100/H200 need only
# 90-real. ARCHS=80-virtual runs the compute_80 device code itself there
# (JIT-compiled at start-up; the features then pick the portable paths).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD:-build-device}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DMUSER_WERROR=ON -DMUSER_SHARED_CORE=ON -DMUSER_DEV=ON \
  -DMUSER_CUDA_ARCHS="${ARCHS:-90-real}" >/dev/null
cmake --build "$B" -j"$(nproc)" --target muser test_cuda test_cuda_tp test_cuda_batch test_cuda_spec test_cuda_split \
  bench_cuda
mkdir -p .devtree/lib
tar -C "$B" -cf .devtree/new.tar libmuser_core.so muser test_cuda test_cuda_tp test_cuda_batch test_cuda_spec \
  test_cuda_split bench_cuda
for lib in $(ldd "$B/muser" | awk '/pcre2|cjson|microhttpd/ {print $3}'); do cp -L "$lib" .devtree/lib/; done
ls -la .devtree/new.tar .devtree/lib
