# CPU kernels: every SIMD table this machine runs against the scalar
# reference; the `muser bench` CLI (JSON shape and error cases).
muser_c_test(kernels LABELS unit TIMEOUT 900)
muser_sh_test(bench LABELS cli TIMEOUT 900)
