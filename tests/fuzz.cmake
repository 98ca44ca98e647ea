# fuzz.cmake — the libFuzzer targets of tests/fuzz as ctest tests, label
# `fuzz`: fuzz_build configures and builds the separate clang project
# tests/fuzz into ${CMAKE_BINARY_DIR}/fuzz (a fixture), then fuzz_<target>
# runs each target for TESSERA_FUZZ_SECONDS on a copy of its seed corpus
# under ASan/UBSan and fails on any crash, leak, sanitizer report, timeout or
# out-of-memory. Without clang or its libFuzzer runtime every test says so
# and is skipped (exit 77). How to run them by hand: docs/fuzzing.md.
find_program(TESSERA_FUZZ_CC NAMES clang clang-14 clang-15 clang-16
  DOC "clang with libFuzzer, for the fuzz targets (ctest -L fuzz)")
set(TESSERA_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz target runs under ctest -L fuzz")
set(TESSERA_FUZZ_DIR ${CMAKE_BINARY_DIR}/fuzz)
set(TESSERA_FUZZ_SH ${PROJECT_SOURCE_DIR}/tests/fuzz/fuzz.sh)

add_test(NAME fuzz_build COMMAND bash ${TESSERA_FUZZ_SH} build ${PROJECT_SOURCE_DIR}
  ${TESSERA_FUZZ_DIR} "${TESSERA_FUZZ_CC}")
set_tests_properties(fuzz_build PROPERTIES LABELS fuzz TIMEOUT 600 FIXTURES_SETUP fuzz
  SKIP_RETURN_CODE 77)

foreach(target config tokens llmc checkpoint ckpt_meta plugin safetensors cluster hf
    schedule_file)
  add_test(NAME fuzz_${target} COMMAND bash ${TESSERA_FUZZ_SH} run ${PROJECT_SOURCE_DIR}
    ${TESSERA_FUZZ_DIR} ${target} ${TESSERA_FUZZ_SECONDS})
  math(EXPR timeout "${TESSERA_FUZZ_SECONDS} + 120")
  set_tests_properties(fuzz_${target} PROPERTIES LABELS fuzz TIMEOUT ${timeout}
    FIXTURES_REQUIRED fuzz SKIP_RETURN_CODE 77)
endforeach()
