# plugin.cmake — the plugin loader's tests: test plugins built as MODULE
# libraries tessera-<name>.so (no "lib" prefix, linking nothing of ours) into
# one directory, test_plugin's cases (one well-formed plugin, every
# rejection, damaged plugin files), the command line with a truncated plugin,
# and the SDK install test (install, build examples/hello-plugin
# against the installed prefix, load it by name from an INI file).
set(TESSERA_TEST_PLUGIN_DIR ${CMAKE_BINARY_DIR}/tests/plugins)

# source (tests/plugin/<source>.c) -> plugin file name. wrong_name.c becomes
# tessera-misnamed.so while its descriptor says "renamed".
set(TESSERA_TEST_PLUGINS
  good:good wrong_major:wrong_major newer_minor:newer_minor wrong_name:misnamed
  no_symbol:no_symbol small_struct:small_struct dup_axis:dup_axis conflict:conflict
  fail_init:fail_init meshaxes:meshaxes poison:poison shardall:shardall optshard:optshard
  skew:skew oldattn:oldattn axisspec:axisspec onethread:onethread
  flags12:flags12)
set(TESSERA_TEST_PLUGIN_TARGETS)
foreach(pair ${TESSERA_TEST_PLUGINS})
  string(REPLACE ":" ";" pair ${pair})
  list(GET pair 0 src)
  list(GET pair 1 name)
  add_library(test_plugin_${name} MODULE ${PROJECT_SOURCE_DIR}/tests/plugin/${src}.c)
  target_include_directories(test_plugin_${name} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  # The loader's test plugins are ABI 1.0 plugins: every 1.x core keeps
  # loading them (poison and optshard, written with this ABI, declare the
  # current one).
  # skew and oldattn are ABI 1.2 plugins reading the flat host fields (skew
  # asks host->comm and host->comm_rank in its hook, every step of a run);
  # poison, optshard, axisspec and onethread, written with this ABI,
  # declare it (1.3) and use the host's sub-tables.
  if(src STREQUAL "skew" OR src STREQUAL "oldattn")
    target_compile_definitions(test_plugin_${name} PRIVATE TS_PLUGIN_TARGET_MINOR=2)
  elseif(src STREQUAL "poison" OR src STREQUAL "optshard" OR src STREQUAL "axisspec"
      OR src STREQUAL "onethread" OR src STREQUAL "flags12")
    target_compile_definitions(test_plugin_${name} PRIVATE TS_PLUGIN_TARGET_MINOR=3)
  else()
    target_compile_definitions(test_plugin_${name} PRIVATE TS_PLUGIN_TARGET_MINOR=0)
  endif()
  # --no-undefined: a plugin that calls into libtessera directly fails to link.
  target_link_options(test_plugin_${name} PRIVATE -Wl,--no-undefined)
  set_target_properties(test_plugin_${name} PROPERTIES PREFIX "" SUFFIX ".so"
    OUTPUT_NAME tessera-${name} LIBRARY_OUTPUT_DIRECTORY ${TESSERA_TEST_PLUGIN_DIR}
    C_VISIBILITY_PRESET hidden)
  list(APPEND TESSERA_TEST_PLUGIN_TARGETS test_plugin_${name})
endforeach()

add_executable(test_plugin ${PROJECT_SOURCE_DIR}/tests/test_plugin.c)
target_link_libraries(test_plugin PRIVATE tessera)
add_dependencies(test_plugin ${TESSERA_TEST_PLUGIN_TARGETS})

foreach(case
    good_plugin_registers_everything
    auto_axis_takes_the_rest_of_the_world
    missing_plugin_names_searched_paths
    missing_symbol_is_rejected
    abi_major_mismatch_is_rejected
    newer_abi_minor_is_rejected
    descriptor_name_must_match_file
    small_descriptor_is_rejected
    two_plugins_claiming_one_axis_conflict
    undeclared_key_in_plugin_section_is_rejected
    bad_value_in_plugin_section_is_rejected
    conflicting_transforms_are_rejected
    failed_init_is_reported
    plugin_named_twice_is_rejected
    discover_lists_good_and_skips_broken
    host_subtables_match_their_flat_fields
    thread_safe_names_the_first_plugin_without_the_flag
    truncated_plugin_file_is_rejected
    non_elf_plugin_file_is_rejected
    plugin_path_that_is_a_directory_is_rejected
    empty_plugin_file_is_rejected
    plugin_file_of_another_class_or_machine_is_rejected)
  add_test(NAME plugin_${case} COMMAND test_plugin ${case} ${TESSERA_TEST_PLUGIN_DIR})
  set_tests_properties(plugin_${case} PROPERTIES LABELS core TIMEOUT 30
    ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()

# The command line with a truncated plugin file: an error naming the file and
# an exit status, not SIGBUS inside dlopen.
add_test(NAME plugin_truncated_file_fails_train_without_a_signal
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/plugin_damaged_file.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR} $<TARGET_FILE:test_plugin_good>)
set_tests_properties(plugin_truncated_file_fails_train_without_a_signal PROPERTIES
  LABELS core TIMEOUT 90 ENVIRONMENT "${TESSERA_TEST_ENV}")

# Installs the build into a temporary prefix and builds the out-of-tree example
# against it; needs cmake/tessera-install.cmake included by the top level.
add_test(NAME sdk_install_builds_and_loads_hello_plugin
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/sdk_install.sh ${CMAKE_BINARY_DIR}
    ${PROJECT_SOURCE_DIR} $<TARGET_FILE:test_plugin>)
set_tests_properties(sdk_install_builds_and_loads_hello_plugin PROPERTIES
  LABELS core TIMEOUT 180 ENVIRONMENT "${TESSERA_TEST_ENV}")

# The ABI 1.1 examples (module hooks, an attention provider, the token
# dispatchers a2a and flex) built against the installed SDK and run
# (tests/sdk_examples.sh).
add_executable(test_dispatch ${PROJECT_SOURCE_DIR}/tests/test_dispatch.c)
target_link_libraries(test_dispatch PRIVATE tessera)
add_test(NAME sdk_examples_build_and_run
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/sdk_examples.sh ${CMAKE_BINARY_DIR}
    ${PROJECT_SOURCE_DIR} $<TARGET_FILE:tessera_cli> $<TARGET_FILE:test_dispatch>
    ${TESSERA_TEST_PLUGIN_DIR} $<TARGET_FILE:test_dispatch_parity>)
set_tests_properties(sdk_examples_build_and_run PROPERTIES LABELS core TIMEOUT 600
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
add_dependencies(test_dispatch ${TESSERA_TEST_PLUGIN_TARGETS})

# examples/hsdp (a strategy with axes of its own, ABI 1.2) built against the
# installed SDK and run on 8 ranks against one rank and its plan
# (tests/hsdp.sh).
add_test(NAME sdk_hsdp_example_matches_one_rank_and_its_plan
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/hsdp.sh ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR}
    $<TARGET_FILE:tessera_cli>)
set_tests_properties(sdk_hsdp_example_matches_one_rank_and_its_plan PROPERTIES LABELS "core;hsdp"
  TIMEOUT 300 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# Token dispatchers (label ep): the ep plugin's built-in "all_to_all" and
# "all_gather" (plugins/ep/dispatch_*.c, compiled into the test plugin
# tessera-ep_dispatchers.so, which registers them and nothing else) and the
# example "flex" (examples/flex-dispatcher, built here too as
# tessera-flex.so; sdk_examples.sh builds it out of tree against the SDK),
# each checked against the contract by test_dispatch on 2 and 4 ranks, and
# all three against each other by test_dispatch_parity: bit-identical expert
# rows, probabilities and combined rows for one random top-k routing, flex's
# dispatch sending exactly the duplicate rows fewer.
add_library(test_plugin_ep_dispatchers MODULE ${PROJECT_SOURCE_DIR}/tests/plugin/ep_dispatchers.c
  ${PROJECT_SOURCE_DIR}/plugins/ep/dispatch_a2a.c ${PROJECT_SOURCE_DIR}/plugins/ep/dispatch_gather.c)
target_include_directories(test_plugin_ep_dispatchers PRIVATE ${PROJECT_SOURCE_DIR}/include
  ${PROJECT_SOURCE_DIR}/plugins/ep)
add_library(test_plugin_flex MODULE
  ${PROJECT_SOURCE_DIR}/examples/flex-dispatcher/flex_dispatcher.c)
target_include_directories(test_plugin_flex PRIVATE ${PROJECT_SOURCE_DIR}/include)
foreach(t test_plugin_ep_dispatchers test_plugin_flex)
  string(REPLACE "test_plugin_" "" name ${t})
  target_link_options(${t} PRIVATE -Wl,--no-undefined)
  set_target_properties(${t} PROPERTIES PREFIX "" SUFFIX ".so" OUTPUT_NAME tessera-${name}
    LIBRARY_OUTPUT_DIRECTORY ${TESSERA_TEST_PLUGIN_DIR} C_VISIBILITY_PRESET hidden)
endforeach()
add_executable(test_dispatch_parity ${PROJECT_SOURCE_DIR}/tests/test_dispatch_parity.c)
target_link_libraries(test_dispatch_parity PRIVATE tessera)
add_dependencies(test_dispatch test_plugin_ep_dispatchers test_plugin_flex)
add_dependencies(test_dispatch_parity test_plugin_ep_dispatchers test_plugin_flex)
set(TESSERA_DISPATCH_INI ${CMAKE_BINARY_DIR}/tests/dispatchers.ini)
file(WRITE ${TESSERA_DISPATCH_INI}
  "[parallel]\nplugins = ep_dispatchers, flex\nplugin_path = ${TESSERA_TEST_PLUGIN_DIR}\n")
foreach(name all_to_all all_gather flex)
  # ranks:experts; 6 rounds (probabilities in odd rounds).
  foreach(case 2:4 4:8)
    string(REPLACE ":" ";" case ${case})
    list(GET case 0 n)
    list(GET case 1 experts)
    add_test(NAME ep_dispatch_${name}_meets_contract_np${n}
      COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${n} $<TARGET_FILE:test_dispatch>
        ${TESSERA_DISPATCH_INI} ${name} ${experts} 6)
    set_tests_properties(ep_dispatch_${name}_meets_contract_np${n} PROPERTIES LABELS ep
      TIMEOUT 120 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
  endforeach()
endforeach()
# ranks:experts:top-k.
foreach(case 2:4:2 3:6:3 4:8:4)
  string(REPLACE ":" ";" case ${case})
  list(GET case 0 n)
  list(GET case 1 experts)
  list(GET case 2 topk)
  add_test(NAME ep_dispatchers_agree_and_flex_sends_no_duplicates_np${n}
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${n} $<TARGET_FILE:test_dispatch_parity>
      ${TESSERA_DISPATCH_INI} ${experts} ${topk} 6)
  set_tests_properties(ep_dispatchers_agree_and_flex_sends_no_duplicates_np${n} PROPERTIES
    LABELS ep TIMEOUT 120 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
endforeach()

# Two plugins may act in one phase; one changing a placement another set is
# refused, naming both transforms (conflict places the parameters S(1) over
# dp in SHARD_TENSOR, shardall S(0) in SHARD_OPTIMIZER). The config
# (configs/tiny.ini-like, written by the test) is a one-layer model.
file(WRITE ${CMAKE_BINARY_DIR}/tests/conflict_model.ini
  "[model]\nlayers = 1\nd_model = 16\nheads = 2\nvocab = 256\ncontext = 16\n[train]\nsteps = 2\nmicro_batch = 2\n")
add_test(NAME plugin_placement_conflict_names_both_transforms
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/run_expect_fail.sh 20
    "transforms conflict: plugin 'shardall' \\(transform 'shard_everything', phase SHARD_OPTIMIZER\\) places wte S\\(0\\) over dp, which plugin 'conflict' \\(transform 'conflict_params'\\) placed S\\(1\\)"
    -- $<TARGET_FILE:tessera_cli> plan ${CMAKE_BINARY_DIR}/tests/conflict_model.ini --world 2
    --set parallel.plugins=dp,conflict,shardall
    --set "parallel.plugin_path=${TESSERA_TEST_PLUGIN_DIR}:$<TARGET_FILE_DIR:tessera_plugin_dp>"
    --set conflict.stages=false)
set_tests_properties(plugin_placement_conflict_names_both_transforms PROPERTIES LABELS core
  TIMEOUT 60 ENVIRONMENT "${TESSERA_TEST_ENV}")

# An axis of a plugin's own (register_axis_spec, ABI 1.2): placed where it
# asked (before dp) in the order and the groups tessera plan prints; bad
# claims refused naming the axis (a place before no axis, a bad name, a
# struct too small).
foreach(case good before_nothing bad_name small)
  set(want_good "order tp-cp-ep-own-dp-pp")
  set(want_before_nothing "plugin 'axisspec' places axis 'own' before 'nothing', which is no mesh axis")
  set(want_bad_name "registers axis 'Own' \\(an axis name is")
  set(want_small "register_axis_spec: struct_size 4, the core knows")
  set(cmd $<TARGET_FILE:tessera_cli> plan ${CMAKE_BINARY_DIR}/tests/conflict_model.ini --world 2
    --set parallel.plugins=axisspec --set "parallel.plugin_path=${TESSERA_TEST_PLUGIN_DIR}"
    --set axisspec.how=${case})
  if(case STREQUAL "good")
    add_test(NAME plugin_axis_spec_${case} COMMAND ${cmd})
    set_tests_properties(plugin_axis_spec_${case} PROPERTIES
      PASS_REGULAR_EXPRESSION "${want_good}.*own +1 group +of +2, the first \\[0, 1\\]")
  else()
    add_test(NAME plugin_axis_spec_${case}
      COMMAND bash ${PROJECT_SOURCE_DIR}/tests/run_expect_fail.sh 20 "${want_${case}}" -- ${cmd})
  endif()
  set_tests_properties(plugin_axis_spec_${case} PROPERTIES LABELS core TIMEOUT 60
    ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
