#!/usr/bin/env bash
# kernel_times.sh — where a batched step's time goes, kernel by kernel, on
# the GPU machine (the lab's, not the product's): ncu times every launch of
# `muser bench --parallel B` on a 4-layer file of the 30B's geometry (each
# kernel alone, serialized: no PDL overlap, no launch gaps) and
# kernel_times.py sums one step by kernel name. Run from the repository
# root with .devtree/new/ holding a build (dev/cuda/device_run.sh's layout):
#   [WIDTHS="1 2 8"] bash dev/cuda/kernel_times.sh
set -u
D=.devtree
OUT=${OUT:-/tmp/kernel-times}
mkdir -p "$OUT"
CUDALIB=$(dirname "$(find / -name 'libcublas.so.13' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$PWD/$D/new:$PWD/$D/lib:$CUDALIB
NCU=$(command -v ncu || find / -name ncu -type f -perm -u+x 2>/dev/null | head -1)
M4=/dev/shm/m4.gguf
[ -s $M4 ] || $D/new/muser synth --preset 30b --mix meta-17gb --layers 4 -o $M4 >/dev/null 2>&1
for B in ${WIDTHS:-1 2 8}; do
    timeout 300 "$NCU" --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
        --log-file "$OUT/k$B.csv" $D/new/muser bench -m $M4 --backend cuda --lane fast --parallel "$B" --depths 0 \
        -n 2 --rounds 1 --pp 0 >"$OUT/k$B.out" 2>&1
    echo "ncu, $B rows: rc=$?"
done
python3 dev/cuda/kernel_times.py $(for B in ${WIDTHS:-1 2 8}; do echo "$OUT/k$B.csv"; done)
