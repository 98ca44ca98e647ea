# pp_tests.cmake — the pp plugin's suite (ctest -L pp). Pure logic, no MPI, no
# training. Included from plugins/pp/CMakeLists.txt.
#
# test_pp_schedules: GPipe, 1F1B and interleaved 1F1B from schedules.c,
# checked as action lists and under the core's unit-time simulator
# (core/base/schedule.c, compiled in so these tests need no libtessera).
add_executable(test_pp_schedules
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_schedules.c
  ${CMAKE_CURRENT_SOURCE_DIR}/schedules.c
  ${PROJECT_SOURCE_DIR}/core/base/schedule.c
  ${PROJECT_SOURCE_DIR}/core/base/status.c)
target_include_directories(test_pp_schedules PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/include
  ${TESSERA_CORE_INCLUDE_DIRS})

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
  timeline_print_format
  zero_bubble_valid
  zb_h1_bubble_a_third_of_1f1b
  zero_bubble_in_flight
  simulator_catches_broken_split
  zb_v_cache_matches_fresh)
foreach(property ${pp_schedule_properties})
  add_test(NAME pp_schedule_${property} COMMAND test_pp_schedules ${property})
  set_tests_properties(pp_schedule_${property} PROPERTIES
    LABELS pp TIMEOUT 60 ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()

# test_pp_plugin: the built tessera-pp.so loaded through the core's registry
# (stage assignment on the GPT-2 layout plan, configuration errors, the
# scheduler against the generators).
add_executable(test_pp_plugin
  ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_pp_plugin.c
  ${CMAKE_CURRENT_SOURCE_DIR}/schedules.c)
target_include_directories(test_pp_plugin PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(test_pp_plugin PRIVATE tessera)
add_dependencies(test_pp_plugin tessera_plugin_pp)

foreach(case
    even_split_assigns_layers_in_order
    layers_per_stage_sets_uneven_split
    interleaved_assigns_virtual_stages
    bad_layers_per_stage_is_a_config_error
    layers_not_divisible_names_size_and_virtual_stages
    interleaved_needs_two_virtual_stages
    scheduler_matches_generator
    scheduler_refuses_bad_micro_batches)
  add_test(NAME pp_plugin_${case}
    COMMAND test_pp_plugin ${case} $<TARGET_FILE_DIR:tessera_plugin_pp>)
  set_tests_properties(pp_plugin_${case} PROPERTIES
    LABELS pp TIMEOUT 60 ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
