#!/usr/bin/env bash
# cuda_device_run.sh — one call on a GPU machine: correctness first, then
# timing, a short table last. Run from the repository root with the build
# outputs in .devtree/ (muser, test_cuda, bench_cuda, lib/, shared/):
#   bash .devtree/cuda_device_run.sh [tests|bench|all] [bench args...]
# Logs go to $OUT (or /tmp/cuda-run).
set -u
D=.devtree
OUT=${OUT:-/tmp/cuda-run}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$D/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
what=${1:-all}
shift || true
t0=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv |
    tee "$OUT/gpu.txt"
ldd $D/muser | grep -E "not found" && echo "MISSING LIBRARIES"

if [ "$what" = tests ] || [ "$what" = all ]; then
    stamp "test_cuda"
    MUSER_TEST_DATA=$PWD/tests/data MUSER_DATA_DIR=$PWD/$D/shared timeout 200 $D/test_cuda >"$OUT/test_cuda.log" 2>&1
    echo "test_cuda rc=$?"
    grep -E "CHECK failed|SKIPPED|passed|exact kv|kv f16|decode:|^  [a-zA-Z]" "$OUT/test_cuda.log" | head -80
    stamp "muser parity --backend cuda"
    N=tests/data/fixtures/nano
    timeout 60 $D/muser parity -m $N/nano-Q4_K_M.gguf --tokens $N/tokens.txt --ref $N/nano-Q4_K_M.exact.f32 \
        --backend cuda --kv f32 2>&1 | tail -4
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
    M=/tmp/m.gguf
    shm=$(df -B1G --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
    [ -n "$shm" ] && [ "$shm" -ge 24 ] && M=/dev/shm/m.gguf
    if [ ! -s "$M" ]; then
        stamp "synth 30b meta-17gb -> $M"
        /usr/bin/time -v $D/muser synth --preset 30b --mix meta-17gb -o $M 2>"$OUT/synth.log" >/dev/null
        grep -E "synth: wrote|Elapsed|Maximum resident" "$OUT/synth.log"
    fi
    stamp "bench_cuda $*"
    timeout 300 $D/bench_cuda -m $M "$@" 2>&1 | tee "$OUT/bench.log" | grep -v "^cuda: uploading"
    echo "bench rc=$?"
fi
if [ "$what" = e2e ]; then
    # the CLI end to end: run and chat on the GPU, the same greedy text as the
    # CPU, and the clear error / CPU fallback for a model the GPU cannot run
    N=tests/data/fixtures/nano/nano-Q4_K_M.gguf
    for be in cuda cpu; do
        stamp "muser run --backend $be"
        timeout 60 $D/muser run -m $N -p "The cat" -n 24 --temp 0 --backend $be >"$OUT/run_$be.txt" 2>"$OUT/run_$be.err"
        echo "rc=$? $(head -c 200 "$OUT/run_$be.txt" | tr '\n' ' ')"
    done
    cmp -s "$OUT/run_cuda.txt" "$OUT/run_cpu.txt" && echo "run: cuda and cpu greedy text identical" || echo "run: TEXT DIFFERS"
    stamp "muser run --backend cuda/auto on stories260K (head_dim 8)"
    timeout 60 $D/muser run -p "Once upon a time" -n 8 --temp 0 --backend cuda 2>&1 | tail -2
    timeout 60 $D/muser run -p "Once upon a time" -n 8 --temp 0 --backend auto 2>&1 | tail -3
    stamp "muser chat --backend cuda"
    printf 'Hello there\n' | timeout 60 $D/muser chat -m $N -n 16 --temp 0 --backend cuda 2>&1 | tail -4
    echo "chat rc=$?"
fi

if [ "$what" = ncu ]; then
    # Nsight Compute on four consecutive matvec launches of one layer (qkv+gate,
    # wo + tail, gate/up, down + tail), op by op; clocks left alone.
    M=/dev/shm/m.gguf; [ -s "$M" ] || M=/tmp/m.gguf
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    stamp "ncu ($NCU)"
    MUSER_CUDA_GRAPH=0 MUSER_CUDA_PDL=0 timeout 240 "$NCU" --clock-control none -k regex:matvec_kernel \
        --launch-skip 60 --launch-count 4 --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
        $D/bench_cuda -m "$M" --depths 0 --gen 2 --pp 0 --copy-gb 0.2 >"$OUT/ncu.txt" 2>&1
    echo "ncu rc=$?"
    grep -E "matvec_kernel|Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Compute \(SM\)|Issue Slots Busy|Issued Ipc|Warp Cycles Per Issued|Achieved Occupancy|No Eligible|Eligible Warps|stalled|Stall" \
        "$OUT/ncu.txt" | cut -c1-220 | head -90
fi
stamp done
if [ "$what" = sass ] || [ "$what" = all ]; then
    CU=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
    $CU --dump-sass $D/bench_cuda 2>/dev/null | grep -oE "LDG\.E\.128[A-Z.]*|LDG\.E\.[A-Z0-9.]*|IDP\.4A[A-Z.]*|HMMA\.[A-Z0-9.]*" |
        sort | uniq -c | sort -rn | head -8 >"$OUT/sass.txt"
    echo "SASS instruction counts:"; cat "$OUT/sass.txt"
fi
