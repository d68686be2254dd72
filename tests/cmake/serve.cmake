# The HTTP server: request parsing and response shapes (C), the real
# server process against the official openai npm client (tests/server),
# and a libFuzzer target for the request parser.
muser_c_test(serve LABELS unit)
muser_sh_test(serve LABELS server TIMEOUT 900)

if(MUSER_FUZZ)
  add_executable(fuzz_request tests/fuzz/fuzz_request.c)
  target_link_libraries(fuzz_request PRIVATE muser_core)
  target_compile_definitions(fuzz_request PRIVATE
    MUSER_FUZZ_VOCAB="${CMAKE_SOURCE_DIR}/tests/data/vocab/nano-vocab.gguf")
  target_compile_options(fuzz_request PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_request PRIVATE -fsanitize=fuzzer,address,undefined)
endif()
