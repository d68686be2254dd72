# Tokenizer tests: vocabularies and test vectors (tests/data/vocab, and the
# big ones from the shared data dir) and the CLI. Its fuzz target: fuzz.cmake.
muser_c_test(tokenizer LABELS unit)
target_compile_definitions(test_tokenizer PRIVATE MUSER_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
muser_sh_test(tokenize LABELS unit)

