# Test registration. Every C test is tests/test_<name>.c linked against
# muser_core; a test that needs ../shared and cannot find it prints a loud
# SKIPPED line and exits 77, which ctest reports as skipped.
set(MUSER_TEST_DATA "${CMAKE_SOURCE_DIR}/tests/data")
set(MUSER_DEFAULT_DATA_DIR "${CMAKE_SOURCE_DIR}/../shared")

function(muser_c_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "LABELS;SOURCES" ${ARGN})
  add_executable(test_${name} tests/test_${name}.c tests/testlib.c ${T_SOURCES})
  target_link_libraries(test_${name} PRIVATE muser_core)
  target_include_directories(test_${name} PRIVATE tests)
  target_compile_definitions(test_${name} PRIVATE
    MUSER_TEST_DATA="${MUSER_TEST_DATA}" MUSER_DEFAULT_DATA_DIR="${MUSER_DEFAULT_DATA_DIR}"
    MUSER_BIN="$<TARGET_FILE:muser>")
  add_test(NAME ${name} COMMAND test_${name})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
endfunction()

# Shell tests drive the real `muser` binary: tests/cli/<name>.sh
function(muser_sh_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "LABELS" ${ARGN})
  add_test(NAME cli_${name} COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cli/${name}.sh)
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(cli_${name} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}"
    ENVIRONMENT "MUSER_BIN=$<TARGET_FILE:muser>;MUSER_TEST_DATA=${MUSER_TEST_DATA};MUSER_DEFAULT_DATA_DIR=${MUSER_DEFAULT_DATA_DIR};MUSER_SRC=${CMAKE_SOURCE_DIR}")
endfunction()

# Each tests/*.cmake fragment (other than this file) registers its own tests,
# so parallel work on separate modules does not collide in one list.
file(GLOB MUSER_TEST_FRAGMENTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cmake/*.cmake)
foreach(fragment ${MUSER_TEST_FRAGMENTS})
  include(${fragment})
endforeach()
