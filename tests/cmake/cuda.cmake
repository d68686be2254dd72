# CUDA backend: kernel checks against CPU references (through the kernel
# entry points of tests/cuda/cu_test.cu) and fixture parity. Exits 77
# (skipped) on machines without a GPU or builds without nvcc.
if(MUSER_HAVE_CUDA)
  muser_c_test(cuda LABELS cuda TIMEOUT 1200 SOURCES tests/fixture.c tests/cuda/cu_test.cu tests/cuda/kernel_ref.c
               tests/cuda/rows_test.c)
  muser_cuda_target(test_cuda)
  target_include_directories(test_cuda PRIVATE tests/cuda)
  if(MUSER_CUDA_ARCHS MATCHES "(^|;)90(-real)?(;|$)")
    # sm_90 machine code in the build: a Hopper GPU must then run Hopper's paths
    target_compile_definitions(test_cuda PRIVATE MUSER_TEST_BUILT_SM90=1)
  endif()
else()
  muser_c_test(cuda LABELS cuda TIMEOUT 1200 SOURCES tests/fixture.c)
endif()
# The same suites on the portable paths (no clusters, no programmatic
# dependent launch: what GPUs below Hopper run), forced on any GPU.
add_test(NAME cuda_portable COMMAND test_cuda)
set_tests_properties(cuda_portable PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1200 LABELS "cuda"
                     ENVIRONMENT "MUSER_CUDA_PORTABLE=1")
# Weight sharing between sessions and batched decode against one-by-one.
muser_c_test(cuda_batch LABELS cuda TIMEOUT 600 SOURCES tests/fixture.c)
add_test(NAME cuda_batch_portable COMMAND test_cuda_batch)
set_tests_properties(cuda_batch_portable PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS "cuda"
                     ENVIRONMENT "MUSER_CUDA_PORTABLE=1")
# Tensor parallel (--gpus N) against the single-GPU backend: N = 1 runs the
# NCCL path over a communicator of size 1; N = 2 is skipped (77) with fewer
# GPUs present.
add_executable(test_cuda_tp tests/test_cuda_tp.c tests/testlib.c tests/fixture.c tests/tinymodel.c)
target_link_libraries(test_cuda_tp PRIVATE muser_core)
target_include_directories(test_cuda_tp PRIVATE tests)
target_compile_definitions(test_cuda_tp PRIVATE MUSER_TEST_DATA="${MUSER_TEST_DATA}"
  MUSER_DEFAULT_DATA_DIR="${MUSER_DEFAULT_DATA_DIR}" MUSER_BIN="$<TARGET_FILE:muser>")
foreach(n 1 2)
  add_test(NAME cuda_tp${n} COMMAND test_cuda_tp ${n})
  set_tests_properties(cuda_tp${n} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600 LABELS "cuda")
endforeach()
# Speculative decoding with a DFlash drafter on CUDA: the target's capture,
# the drafter's logits against the CPU drafter's, rollback of the KV planes
# bit for bit, greedy identity with plain decoding (nano fixtures).
muser_c_test(cuda_spec LABELS cuda TIMEOUT 900 SOURCES tests/fixture.c tests/tinymodel.c tests/tinydraft.c)
# --gpu-layers: every split N = 0..L of the fixtures against the reference,
# the all-CPU and the all-GPU runs; the split's rewinds, checkpoints and
# batched rows; auto under --gpu-mem caps. On the GPU's own paths and the
# portable ones.
muser_c_test(cuda_split LABELS cuda TIMEOUT 1200 SOURCES tests/fixture.c)
add_test(NAME cuda_split_portable COMMAND test_cuda_split)
set_tests_properties(cuda_split_portable PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 1200 LABELS "cuda"
                     ENVIRONMENT "MUSER_CUDA_PORTABLE=1")
