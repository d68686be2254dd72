# The kernel lab (dev/, as llm.c keeps dev/cuda): experiments and probes,
# built only with -DMUSER_DEV=ON (CI builds it so that it does not rot).
if(MUSER_HAVE_CUDA)
  # bench_cuda: A/B of tuning settings in one process, and the streaming-chain probes
  add_executable(bench_cuda dev/cuda/bench_cuda.c dev/cuda/lab_chain.cu)
  target_link_libraries(bench_cuda PRIVATE muser_core)
  target_include_directories(bench_cuda PRIVATE dev/cuda)
  muser_cuda_target(bench_cuda)
  # the streaming-chain probes use Hopper's bulk copies and clusters
  # unguarded: the lab is built for sm_90 alone, whatever the product's list
  set_target_properties(bench_cuda PROPERTIES CUDA_ARCHITECTURES "90-real")
  # the probe's multicast bulk copies (sm_90 runs them; ptxas advises sm_90a
  # for the sake of future GPUs)
  set_source_files_properties(dev/cuda/lab_chain.cu PROPERTIES COMPILE_OPTIONS
                              "-Xptxas=--suppress-async-bulk-multicast-advisory-warning")
endif()
# bench_kq: the fast-lane K-quant kernels alone (batched decode's arithmetic)
add_executable(bench_kq dev/cpu/bench_kq.c)
target_link_libraries(bench_kq PRIVATE muser_core)
