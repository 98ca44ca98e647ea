# layers.cmake — the layering rule of core/ (docs/layers.md): no file of a
# layer includes a header of a higher one. tests/check_layers.py reads the
# layers from docs/layers.md and checks the source tree; the second test
# plants an arrow up in a copy and expects the check to refuse it.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  add_test(NAME core_layers_point_down
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/check_layers.py ${PROJECT_SOURCE_DIR})
  add_test(NAME core_layers_checker_refuses_an_arrow_up
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/check_layers.py --self-test
      ${PROJECT_SOURCE_DIR})
  # core/ names no mesh axis (the standard ones are the SDK's table, the
  # plugins claim them): no TS_AXIS_* and no axis-name string in its code.
  add_test(NAME core_names_no_mesh_axis
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/check_core_axis_names.py
      ${PROJECT_SOURCE_DIR})
  set_tests_properties(core_layers_point_down core_layers_checker_refuses_an_arrow_up
    core_names_no_mesh_axis PROPERTIES LABELS core TIMEOUT 60)
else()
  message(STATUS "core_layers_point_down: no python3: not registered")
endif()
