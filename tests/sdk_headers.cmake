# sdk_headers.cmake — what a plugin includes declares no function of
# libtessera: tests/check_plugin_headers.py preprocesses include/tessera/
# plugin.h and the *_types.h headers it brings with the build's C compiler
# and fails naming any prototype, non-inline definition, object of external
# linkage or static inline helper calling a ts_* function; the second test
# plants each of those in a copy of include/ and expects the check to refuse
# them.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME sdk_plugin_headers_declare_no_library_function
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/check_plugin_headers.py
      ${PROJECT_SOURCE_DIR} ${CMAKE_C_COMPILER})
  add_test(NAME sdk_plugin_headers_checker_refuses_a_planted_declaration
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/check_plugin_headers.py --self-test
      ${PROJECT_SOURCE_DIR} ${CMAKE_C_COMPILER})
  set_tests_properties(sdk_plugin_headers_declare_no_library_function
    sdk_plugin_headers_checker_refuses_a_planted_declaration PROPERTIES LABELS core TIMEOUT 60)
else()
  message(STATUS "sdk_plugin_headers_declare_no_library_function: no python3: not registered")
endif()
