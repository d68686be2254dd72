# Fuzz targets: tests/fuzz/fuzz_<name>.c, whose seeds and every input that
# ever crashed, leaked or hit undefined behaviour live in
# tests/fuzz/corpus/<name> (scripts/fuzz.sh runs them; docs/fuzzing.md).
# With MUSER_FUZZ=ON (clang) each is a libFuzzer binary fuzz_<name>. In
# every build, the test fuzz_replay_<name> runs the corpus once through the
# target (under the sanitizers in the sanitizer build), so a regression
# fails ctest deterministically.
set(MUSER_FUZZ_VOCAB_DEFAULT "${CMAKE_SOURCE_DIR}/tests/data/vocab/nano-vocab.gguf")

function(muser_fuzz_target name)
  cmake_parse_arguments(F "" "" "MUTATOR;SOURCES" ${ARGN})
  set(corpus ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name})
  if(MUSER_FUZZ)
    set(exe fuzz_${name})
    add_executable(${exe} tests/fuzz/fuzz_${name}.c ${F_MUTATOR} ${F_SOURCES})
    target_link_options(${exe} PRIVATE -fsanitize=fuzzer)
    add_test(NAME fuzz_replay_${name} COMMAND ${exe} -runs=0 ${corpus})
  else()
    set(exe fuzz_replay_${name})
    add_executable(${exe} tests/fuzz/fuzz_${name}.c tests/fuzz/replay_main.c ${F_SOURCES})
    add_test(NAME fuzz_replay_${name} COMMAND ${exe} ${corpus})
  endif()
  target_link_libraries(${exe} PRIVATE muser_core)
  target_include_directories(${exe} PRIVATE tests)
  target_compile_definitions(${exe} PRIVATE MUSER_TEST_DATA="${MUSER_TEST_DATA}"
    MUSER_DEFAULT_DATA_DIR="${MUSER_DEFAULT_DATA_DIR}")
  target_compile_definitions(${exe} PRIVATE MUSER_FUZZ_VOCAB="${MUSER_FUZZ_VOCAB_DEFAULT}"
    MUSER_FUZZ_VOCAB_DIR="${CMAKE_SOURCE_DIR}/tests/data/vocab")
  set_tests_properties(fuzz_replay_${name} PROPERTIES LABELS fuzz TIMEOUT 600)
endfunction()

muser_fuzz_target(gguf)
muser_fuzz_target(tokenize)
muser_fuzz_target(request)
muser_fuzz_target(atem)
# model: also DFlash drafters, against a tiny target the target builds (tinymodel.c)
muser_fuzz_target(model MUTATOR tests/fuzz/gguf_mutator.c SOURCES tests/tinymodel.c tests/testlib.c)

# Writes the model target's seeds (tiny models of each architecture and
# tokenizer type) into a directory: built on demand only.
add_executable(make_model_seeds EXCLUDE_FROM_ALL tests/fuzz/make_model_seeds.c tests/tinymodel.c tests/tinydraft.c
  tests/testlib.c)
target_link_libraries(make_model_seeds PRIVATE muser_core)
target_include_directories(make_model_seeds PRIVATE tests)
target_compile_definitions(make_model_seeds PRIVATE MUSER_TEST_DATA="${MUSER_TEST_DATA}"
  MUSER_DEFAULT_DATA_DIR="${MUSER_DEFAULT_DATA_DIR}") # (testlib's paths)
