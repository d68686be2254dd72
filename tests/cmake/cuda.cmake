# CUDA backend: kernel checks against CPU references and fixture parity.
# Exits 77 (skipped) on machines without a GPU or builds without nvcc.
muser_c_test(cuda LABELS cuda TIMEOUT 1200)
if(MUSER_HAVE_CUDA)
  # The decode/prefill benchmark (until `muser bench --backend cuda` exists).
  add_executable(bench_cuda tests/bench_cuda.c)
  target_link_libraries(bench_cuda PRIVATE muser_core)
endif()
