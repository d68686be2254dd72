# Tokenizer tests: vocabularies and test vectors (tests/data/vocab, and the
# big ones from the shared data dir), the CLI, and a libFuzzer target.
muser_c_test(tokenizer LABELS unit)
target_compile_definitions(test_tokenizer PRIVATE MUSER_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
muser_sh_test(tokenize LABELS unit)

if(MUSER_FUZZ)
  # Coverage feedback from the library itself (not only the target), so the
  # fuzzer can steer into the pre-tokenizer, BPE and special-token paths.
  # Everything linking the library then needs the coverage runtime too.
  target_compile_options(muser_core PRIVATE -fsanitize=fuzzer-no-link)
  target_link_options(muser_core INTERFACE -fsanitize=fuzzer-no-link)
  add_executable(fuzz_tokenize tests/fuzz/fuzz_tokenize.c)
  target_link_libraries(fuzz_tokenize PRIVATE muser_core)
  target_compile_definitions(fuzz_tokenize PRIVATE
    MUSER_FUZZ_VOCAB="${CMAKE_SOURCE_DIR}/tests/data/vocab/nano-vocab.gguf")
  target_compile_options(fuzz_tokenize PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_tokenize PRIVATE -fsanitize=fuzzer,address,undefined)
endif()
