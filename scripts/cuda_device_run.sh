#!/usr/bin/env bash
# cuda_device_run.sh — one call on a GPU machine: correctness first, then
# timing, a short table last. Run from the repository root with the build
# outputs packed in .devtree/bin.tar.xz (muser, test_cuda, test_cuda_tp,
# bench_cuda; optionally old_bench_cuda for a SASS comparison), the shared
# libraries the GPU machine lacks in .devtree/lib and the shared fixtures
# in .devtree/shared:
#   bash .devtree/cuda_device_run.sh
# Logs go to $OUT (or /tmp/cuda-run): misc.log (GPU, SASS counts, e2e),
# test_cuda.log, test_tp.log, bench.md, ab.log, ncu.txt, sass_new.txt.
set -u
D=.devtree
OUT=${OUT:-/tmp/cuda-run}
mkdir -p "$OUT"
# NVLink multicast can take GPUs that others share out of service: off in every run.
export NCCL_NVLS_ENABLE=0
[ -f $D/bin.tar.xz ] && tar -C $D -xJf $D/bin.tar.xz
NCCL_LIB=$(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/$D/lib:${NCCL_LIB:+$(dirname "$NCCL_LIB"):}/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[+$(( $(date +%s) - t0 ))s] $*"; }
M=/dev/shm/m.gguf
N=tests/data/fixtures/nano/nano-Q4_K_M.gguf
{
    nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.mem --format=csv
    echo "libnccl: ${NCCL_LIB:-not found}"
    ldd $D/muser | grep -E "not found" && echo "MISSING LIBRARIES"
} >"$OUT/misc.log" 2>&1
cat "$OUT/misc.log"

# SASS of the Q4_K gate/up matvec, new and old (instruction mix per kernel)
CU=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
$CU -sass -fun '_Z9mv_kernelI5PolKQILj12EELi1ELi1ELb0EEv8mu_cu_mv' $D/muser >"$OUT/sass_new.txt" 2>&1
[ -x $D/old_bench_cuda ] && $CU -sass -fun '_Z13matvec_kernelILi1ELi1EEv8mu_cu_mv' $D/old_bench_cuda >/tmp/sass_old.txt 2>&1
for f in "$OUT/sass_new.txt" /tmp/sass_old.txt; do
    [ -s "$f" ] && echo "$(basename $f): $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$f") instructions;" \
        "$(grep -oE 'IDP\.4A[A-Z0-9.]*|LDG\.E\.128[A-Z.]*|LDS\.128|I2F[A-Z0-9.]*|LOP3\.LUT' "$f" | sort | uniq -c | tr '\n' ' ')"
done | tee -a "$OUT/misc.log"

stamp "test_cuda (kernels + fixture parity)"
MUSER_TEST_DATA=$PWD/tests/data MUSER_DATA_DIR=$PWD/$D/shared timeout 240 $D/test_cuda >"$OUT/test_cuda.log" 2>&1
echo "test_cuda rc=$?"
grep -E "CHECK failed|SKIPPED|passed|failed" "$OUT/test_cuda.log" | head -40
stamp "test_cuda_tp 1 (NCCL path, communicator of size 1)"
MUSER_TEST_DATA=$PWD/tests/data timeout 120 $D/test_cuda_tp 1 >"$OUT/test_tp.log" 2>&1
echo "test_cuda_tp 1 rc=$?"
grep -vE "^cuda: uploading" "$OUT/test_tp.log" | tail -12

stamp "synth 30b meta-17gb -> $M"
$D/muser synth --preset 30b --mix meta-17gb -o $M 2>&1 | grep -E "synth: wrote"
stamp "muser bench --backend cuda"
timeout 300 $D/muser bench -m $M --backend cuda --lane fast --profile -n 16 >"$OUT/bench.md" 2>/tmp/bench.err
echo "bench rc=$?"; tr '\r' '\n' </tmp/bench.err | grep -vE "uploading" | tail -3 | tee -a "$OUT/misc.log"
stamp "A/B lab at depth 0"
timeout 150 $D/bench_cuda -m $M --gen 24 >"$OUT/ab.log" 2>&1
echo "ab rc=$?"
stamp "e2e: run (cuda, --gpus 1, cpu) on nano"
{
    for be in "--backend cuda" "--backend cuda --gpus 1" "--backend cpu"; do
        timeout 60 $D/muser run -m $N -p "The cat" -n 24 --temp 0 $be 2>&1 | tail -2
    done
    timeout 60 $D/muser run -m $N -p "The cat" -n 4 --temp 0 --backend cuda --gpus 2 2>&1 | tail -1
} >/tmp/e2e.log 2>&1
cat /tmp/e2e.log | tee -a "$OUT/misc.log"
if [ "${NCU:-1}" = 1 ]; then
    # Nsight Compute on four consecutive matvec launches near the end of a
    # token (gate/up, down, qkv, wo), op by op; clocks left alone
    NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    stamp "ncu ($NCUB)"
    MUSER_CUDA_GRAPH=0 MUSER_CUDA_PDL=0 timeout 150 "$NCUB" --clock-control none -k regex:mv_kernel \
        --launch-skip 200 --launch-count 4 --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats --section Occupancy --section LaunchStats \
        $D/muser bench -m $M --backend cuda --lane fast --depths 0 -n 2 --pp 0 >"$OUT/ncu.txt" 2>&1
    echo "ncu rc=$?"
fi
stamp done
echo "================ summary ================"
grep -E "^\| [0-9]|^prefill|^- (device|ceiling)" "$OUT/bench.md"
awk '/Profile at depth 0 /,/^$/' "$OUT/bench.md" | head -3
awk '/Profile at depth 0 /{f=1} f&&/^\|/{print} f&&/^$/&&++n==2{exit}' "$OUT/bench.md"
grep -E "^\|" "$OUT/ab.log"
grep -E "mv_kernel|Duration|DRAM Throughput|Issue Slots Busy|Issued Ipc A|Achieved Occupancy|Registers Per|Eligible Warps|No Eligible" \
    "$OUT/ncu.txt" 2>/dev/null | sed -E 's/ +/ /g' | cut -c1-140 | head -44
