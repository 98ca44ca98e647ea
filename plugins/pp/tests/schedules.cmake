# schedules.cmake — the pp plugin's schedule tests (ctest -L pp): GPipe, 1F1B
# and interleaved 1F1B checked as action lists and under the unit-time
# simulator. Pure logic, no MPI, no model. Included from plugins/pp/CMakeLists.txt.
add_executable(test_pp_schedules
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_schedules.c
  ${CMAKE_CURRENT_SOURCE_DIR}/schedules.c
  ${PROJECT_SOURCE_DIR}/core/schedule.c
  ${PROJECT_SOURCE_DIR}/core/status.c)
target_include_directories(test_pp_schedules PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/include
  ${PROJECT_SOURCE_DIR}/core)

# One ctest per property; the argument names the property in test_schedules.c.
set(pp_schedule_properties
  forward_precedes_backward
  each_send_has_one_receive
  compute_between_its_receive_and_send
  no_deadlock
  bubble_gpipe_1f1b_is_p_minus_1_over_m_plus_p_minus_1
  bubble_interleaved_smaller_by_factor_v
  in_flight_1f1b_at_most_p_gpipe_all_m
  interleaved_warmup_as_megatron
  invalid_arguments_give_config_errors
  simulator_catches_broken_schedules
  timeline_print_format)
foreach(property ${pp_schedule_properties})
  add_test(NAME pp_schedule_${property} COMMAND test_pp_schedules ${property})
  set_tests_properties(pp_schedule_${property} PROPERTIES
    LABELS pp TIMEOUT 60 ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
