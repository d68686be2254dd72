#!/usr/bin/env bash
# device_run.sh — one call on a GPU machine (the lab's, not the product's):
# correctness first, then timing, a short table last. Run from the
# repository root with, in .devtree/ (ignored by git, sent with `carry`):
#   new.tar   the build under test: libmuser_core.so (a -DMUSER_SHARED_CORE=ON
#             build keeps the binaries small), muser, test_cuda, test_cuda_tp,
#             test_cuda_batch, test_cuda_spec, test_cuda_split and bench_cuda (optional)
#   base.tar  optional: a baseline's libmuser_core.so and muser, for A/B
#   lib/      shared libraries the GPU machine lacks (pcre2, cjson, microhttpd)
#   shared/   optional: ../shared's fixtures the tests read (MUSER_DATA_DIR)
#
#   [PP=512] [WIDTHS=1,2,4] [TUNES='a=1 b=0'] [PP_TUNES=...] [NO_TP=1] bash dev/cuda/device_run.sh [tests] [e2e] [synth-bg] [ab]
#       [parallel] [pp] [memcap] [ngl] [ROUNDS]
# tests: test_cuda and test_cuda_batch twice, on the GPU's own paths and
# with MUSER_CUDA_PORTABLE=1 (the paths of GPUs below Hopper); memcap: the
# 30B under --gpu-mem caps (24G at -c 32768, 20G at -c 8192, and 16G, which
# must fail with the plan's message); ngl: the 30B with --gpu-layers (auto
# under 12G, a fixed split, all; bench at a split). The build may be for sm_90 alone
# (-DMUSER_CUDA_ARCHS=90-real: docs/cuda.md).
# Logs go to $OUT (or /tmp/cuda-run).
set -u
D=.devtree
OUT=${OUT:-/tmp/cuda-run}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 # NVLink multicast can take GPUs that others share out of service
MODES="${*:-tests ab e2e}"
ROUNDS=3
for a in $MODES; do case "$a" in [0-9]*) ROUNDS=$a ;; esac; done
for v in new base; do
    [ -f $D/$v.tar ] && mkdir -p $D/$v && tar -C $D/$v -xf $D/$v.tar
done
CUDALIB=$(dirname "$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)")
NCCL_LIB=$(find /usr/local /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$PWD/$D/lib:$CUDALIB:${NCCL_LIB:+$(dirname "$NCCL_LIB"):}${LD_LIBRARY_PATH:-}
t0=$(date +%s)
stamp() { echo "[+$(($(date +%s) - t0))s] $*"; }
with() { local v=$1; shift; LD_LIBRARY_PATH=$PWD/$D/$v:$LD_LIBRARY_PATH "$@"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
N=tests/data/fixtures/nano
M=/dev/shm/m.gguf
# the 30B file: waits for a background synth, or writes it now
need_30b() {
    while pgrep -f "synth --preset 30b" >/dev/null; do sleep 2; done
    if [ ! -s $M ]; then
        stamp "synth 30b meta-17gb"
        with new $D/new/muser synth --preset 30b --mix meta-17gb -o $M >/dev/null 2>&1
        ls -la $M
    fi
}

case " $MODES " in *" synth-bg "*)
    # the 30B file for a later call's `ab`, written in the background (the
    # machine stays warm between calls that follow each other closely)
    [ -s $M ] || setsid bash -c "LD_LIBRARY_PATH=$PWD/$D/new:$LD_LIBRARY_PATH $D/new/muser synth --preset 30b \
        --mix meta-17gb -o $M.part && mv $M.part $M" >/dev/null 2>&1 </dev/null &
    ;;
esac

case " $MODES " in *" tests "*)
    for portable in 0 1; do
        stamp "test_cuda MUSER_CUDA_PORTABLE=$portable"
        with new env MUSER_CUDA_PORTABLE=$portable MUSER_TEST_DATA=$PWD/tests/data MUSER_DATA_DIR=$PWD/$D/shared \
            timeout 400 $D/new/test_cuda >"$OUT/test_cuda_p$portable.log" 2>&1
        echo "test_cuda portable=$portable rc=$?"
        grep -E "route set|CHECK failed|SKIPPED|passed|failed" "$OUT/test_cuda_p$portable.log" | head -30
    done
    if [ -z "${NO_TP:-}" ]; then
        stamp "test_cuda_tp 1"
        with new env MUSER_TEST_DATA=$PWD/tests/data timeout 200 $D/new/test_cuda_tp 1 >"$OUT/test_tp.log" 2>&1
        echo "test_cuda_tp 1 rc=$?"
        grep -E "CHECK failed|passed|failed" "$OUT/test_tp.log" | head -10
    fi
    for portable in 0 1; do
        stamp "test_cuda_batch MUSER_CUDA_PORTABLE=$portable"
        with new env MUSER_CUDA_PORTABLE=$portable MUSER_TEST_DATA=$PWD/tests/data timeout 300 $D/new/test_cuda_batch \
            >"$OUT/test_batch_p$portable.log" 2>&1
        echo "test_cuda_batch portable=$portable rc=$?"
        grep -E "CHECK failed|passed|failed" "$OUT/test_batch_p$portable.log" | head -10
    done
    if [ -x $D/new/test_cuda_split ]; then
        for portable in 0 1; do
            stamp "test_cuda_split MUSER_CUDA_PORTABLE=$portable"
            with new env MUSER_CUDA_PORTABLE=$portable MUSER_TEST_DATA=$PWD/tests/data MUSER_DATA_DIR=$PWD/$D/shared \
                timeout 500 $D/new/test_cuda_split >"$OUT/test_split_p$portable.log" 2>&1
            echo "test_cuda_split portable=$portable rc=$?"
            grep -E "CHECK failed|SKIPPED|passed|failed|-ngl" "$OUT/test_split_p$portable.log" | head -40
        done
        stamp "tests/cli/gpu_layers.sh"
        with new env MUSER_BIN=$PWD/$D/new/muser MUSER_TEST_DATA=$PWD/tests/data timeout 300 bash tests/cli/gpu_layers.sh \
            >"$OUT/cli_gpu_layers.log" 2>&1
        echo "cli gpu_layers rc=$?"; grep -E "FAIL|passed|SKIPPED|differ" "$OUT/cli_gpu_layers.log" | head -20
    fi
    if [ -x $D/new/test_cuda_spec ]; then
        stamp "test_cuda_spec"
        with new env MUSER_TEST_DATA=$PWD/tests/data timeout 300 $D/new/test_cuda_spec >"$OUT/test_spec.log" 2>&1
        echo "test_cuda_spec rc=$?"
        grep -E "CHECK failed|passed|failed|greedy|drafter|rollback|capture" "$OUT/test_spec.log" | head -40
    fi
    ;;
esac

case " $MODES " in *" memcap "*)
    # the GPU memory plan under --gpu-mem: the 30B fits 24G at -c 32768 and
    # 20G at -c 8192 (each also on the portable paths); 16G fails at once
    need_30b
    for spec in "24G 32768 0" "20G 8192 0" "24G 32768 1" "16G 32768 0"; do
        set -- $spec
        stamp "run --gpu-mem $1 -c $2 MUSER_CUDA_PORTABLE=$3"
        f="$OUT/memcap_$1_$2_p$3"
        with new env MUSER_CUDA_PORTABLE=$3 timeout 300 $D/new/muser run -m $M --backend cuda --gpu-mem $1 -c $2 \
            -p "The cat sat" -n 16 --temp 0 >"$f.out" 2>"$f.err"
        echo "rc=$? (16G must fail)"
        grep -E "cuda:|GPU memory|not enough" "$f.err" | cut -c1-400
    done
    stamp "bench --gpu-mem 24G, depths to 32000, pp512"
    with new env MUSER_QUIET=0 timeout 300 $D/new/muser bench -m $M --backend cuda --gpu-mem 24G --lane fast \
        --depths 0,32000 -n 32 --pp 512 >"$OUT/memcap_bench.md" 2>"$OUT/memcap_bench.err"
    echo "rc=$?"; grep -E "^\| [0-9]|device|prefill|pp[0-9]" "$OUT/memcap_bench.md" | cut -c1-600
    ;;
esac

case " $MODES " in *" ngl "*)
    # --gpu-layers on the 30B: auto under a 12G cap (the rest on the CPU),
    # a fixed split, all layers; then bench at a split (decode, pp 128)
    need_30b
    for spec in "12G auto" "24G 26" "24G all"; do
        set -- $spec
        stamp "run --gpu-mem $1 -ngl $2 -c 8192"
        f="$OUT/ngl_$1_$2"
        with new timeout 300 $D/new/muser run -m $M --backend cuda --gpu-mem $1 -ngl $2 -c 8192 -p "The cat sat" \
            -n 16 --temp 0 --verbose >"$f.out" 2>"$f.err"
        echo "rc=$?"; grep -E "gpu-layers|layers split|not enough|GPU memory" "$f.err" | cut -c1-400; head -c 300 "$f.out"
    done
    stamp "bench -ngl 40, depths 0,4096, pp128"
    with new timeout 400 $D/new/muser bench -m $M --backend cuda -ngl 40 --depths 0,4096 -n 8 --pp 128 \
        >"$OUT/ngl_bench.md" 2>"$OUT/ngl_bench.err"
    echo "rc=$?"; grep -E "^\| [0-9]|device|prefill" "$OUT/ngl_bench.md" | cut -c1-400
    ;;
esac

case " $MODES " in *" e2e "*)
    # greedy text of every build on the fixtures: identical across builds
    stamp "greedy text, cuda, both lanes"
    for v in new base; do
        [ -x $D/$v/muser ] || continue
        for f in $N/nano-Q4_K_M.gguf $N/nano-Q8_0.gguf; do
            for lane in fast exact; do
                with $v timeout 60 $D/$v/muser run -m $f -p "The cat sat" -n 48 --temp 0 --backend cuda --lane $lane \
                    2>/dev/null | md5sum | sed "s|-|$v $(basename $f) $lane|"
            done
        done
    done | sort -k3 | tee "$OUT/greedy.txt"
    ;;
esac

case " $MODES " in *" ab "*)
    need_30b
    for r in $(seq "$ROUNDS"); do
        for v in base new; do
            [ -x $D/$v/muser ] || continue
            stamp "bench $v round $r"
            with $v env MUSER_QUIET=1 timeout 200 $D/$v/muser bench -m $M --backend cuda --lane fast \
                --depths 0,32768 -n 64 --pp "${PP:-0}" >"$OUT/bench_${v}_$r.md" 2>"$OUT/bench_${v}_$r.err"
            echo "rc=$? $(grep -E '^\| [0-9]' "$OUT/bench_${v}_$r.md" | awk -F'|' '{printf "d%s %s tok/s; ", $2, $3}')"
            grep -iE "^prefill|pp[0-9]" "$OUT/bench_${v}_$r.md" | head -2
        done
    done
    ;;
esac
case " $MODES " in *" parallel "*)
    # the batch-width ladder of the build under test (several sessions, one row each a step)
    while pgrep -f "synth --preset 30b" >/dev/null; do sleep 2; done
    # TUNES: tuning variants to run the ladder with too (space-separated MUSER_CUDA_TUNE values)
    for tune in "" ${TUNES:-}; do
        stamp "bench --parallel (new) ${tune:-defaults}"
        f="$OUT/parallel${tune:+_$tune}.md"
        with new env MUSER_QUIET=1 MUSER_CUDA_TUNE="$tune" timeout 300 $D/new/muser bench -m $M --backend cuda \
            --lane fast --parallel "${WIDTHS:-1,2,4,8,16}" --depths 0 -n 16 --rounds 2 >"$f" 2>"$f.err"
        echo "rc=$?"; grep -E "^\| [0-9]" "$f"; tail -2 "$f.err"
    done
    ;;
esac
case " $MODES " in *" pp "*)
    # prefill of the build under test: pp512 and decode at depth 0, defaults and each of PP_TUNES
    while pgrep -f "synth --preset 30b" >/dev/null; do sleep 2; done
    for tune in "" ${PP_TUNES:-}; do
        stamp "bench --pp 512 (new) ${tune:-defaults}"
        with new env MUSER_QUIET=1 MUSER_CUDA_TUNE="$tune" timeout 200 $D/new/muser bench -m $M --backend cuda \
            --lane fast --depths 0 -n 32 --pp 512 >"$OUT/pp${tune:+_$tune}.md" 2>"$OUT/pp${tune:+_$tune}.err"
        echo "rc=$? $(grep -E '^\| [0-9]' "$OUT/pp${tune:+_$tune}.md" | awk -F'|' '{printf "d%s %s tok/s; ", $2, $3}')"
        grep -iE "^prefill|pp[0-9]|memory|holds" "$OUT/pp${tune:+_$tune}.md" "$OUT/pp${tune:+_$tune}.err" | head -4
    done
    ;;
esac
stamp done
