# sizes.cmake — the core's size rule: no function in core/**/*.c over 150
# lines and core/train/train.c under 1,000 (tests/check_function_sizes.py
# lists every offender with its file and line, and fails when it finds too
# few functions to be reading the code).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME core_functions_fit_150_lines
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/check_function_sizes.py
      ${PROJECT_SOURCE_DIR})
  set_tests_properties(core_functions_fit_150_lines PROPERTIES LABELS core TIMEOUT 60)
else()
  message(STATUS "core_functions_fit_150_lines: no python3: not registered")
endif()
