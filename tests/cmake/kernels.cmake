# CPU kernels: every SIMD table this machine runs against the scalar
# reference; the `muser bench` CLI (JSON shape and error cases).
muser_c_test(kernels LABELS unit TIMEOUT 900)
muser_sh_test(bench LABELS cli TIMEOUT 900)
# NEON: cross-compiled and run under qemu when the tools are installed (else skipped).
add_test(NAME neon_cross COMMAND bash ${CMAKE_SOURCE_DIR}/tests/neon_cross.sh)
set_tests_properties(neon_cross PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1200 LABELS "cross"
  ENVIRONMENT "MUSER_SRC=${CMAKE_SOURCE_DIR}")
