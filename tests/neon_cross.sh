#!/usr/bin/env bash
# The NEON kernels (src/cpu/kernels_neon.c), which this project's x86
# machines cannot run natively: cross-compile them with the kernel test for
# AArch64 (warnings as errors), twice: baseline Advanced SIMD and with the
# dot-product extension (SDOT), and run the test under qemu-aarch64 when it
# is installed. Skips (77) without an aarch64 cross compiler.
set -u
SRC=${MUSER_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
CC=${AARCH64_CC:-aarch64-linux-gnu-gcc}
if ! command -v "$CC" >/dev/null; then
  echo "SKIPPED: no AArch64 cross compiler ($CC; Debian: gcc-aarch64-linux-gnu)"
  exit 77
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
sources=("$SRC"/src/cpu/kernels_*.c "$SRC"/src/cpu/ops.c "$SRC"/src/quant/*.c "$SRC"/src/util/error.c
         "$SRC"/tests/test_kernels.c "$SRC"/tests/testlib.c)
failed=0
for arch in armv8-a armv8.2-a+dotprod; do
  exe="$TMP/test_kernels_$arch"
  if ! "$CC" -std=gnu11 -O2 -march="$arch" -Wall -Wextra -Wshadow -Wno-unused-parameter -Wvla -Werror \
      -I "$SRC/include" -I "$SRC/src" -I "$SRC/tests" -DMUSER_TEST_DATA='""' -DMUSER_DEFAULT_DATA_DIR='""' \
      -DMUSER_BIN='""' "${sources[@]}" -static -lm -lpthread -o "$exe"; then
    echo "FAIL: cross-compiling for $arch"
    failed=1
    continue
  fi
  echo "compiled for $arch"
  if command -v qemu-aarch64 >/dev/null; then
    if MUSER_TEST_QUICK=1 qemu-aarch64 -cpu max "$exe"; then echo "ran under qemu ($arch): ok"
    else echo "FAIL: kernel test under qemu ($arch)"; failed=1; fi
  else
    echo "qemu-aarch64 not installed: compiled only"
  fi
done
exit $failed
