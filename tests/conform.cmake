# conform.cmake — `tessera conform PLUGIN.so` (apps/conform.c,
# tests/conform/conform.sh): every in-tree plugin passes on two small shapes,
# dp, tp and ep on 2 and 4 ranks, pp, zero and cp on 2 (dp also as --json);
# the SDK examples, built against an installed prefix, pass on 2 ranks; three
# broken test plugins fail exactly the check they break (dptwice: numerics,
# its one-rank resume not judged; leak: memory; forgetful: resume); bad
# command lines and plugins of another ABI are refused at abi.
set(TESSERA_CONFORM_PLUGIN_DIR ${CMAKE_BINARY_DIR}/tests/conform_plugins)
foreach(name dptwice leak forgetful gpipe_sched)
  add_library(test_conform_${name} MODULE ${PROJECT_SOURCE_DIR}/tests/conform/${name}.c)
  target_include_directories(test_conform_${name} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_link_options(test_conform_${name} PRIVATE -Wl,--no-undefined)
  set_target_properties(test_conform_${name} PROPERTIES PREFIX "" SUFFIX ".so"
    OUTPUT_NAME tessera-${name} LIBRARY_OUTPUT_DIRECTORY ${TESSERA_CONFORM_PLUGIN_DIR}
    C_VISIBILITY_PRESET hidden)
endforeach()

set(conform ${PROJECT_SOURCE_DIR}/tests/conform/conform.sh)
set(conform_cmd bash ${conform} $<TARGET_FILE:tessera_cli> ${PROJECT_SOURCE_DIR})
foreach(case dp:2,4:json tp:2,4:- ep:2,4:- pp:2:- zero:2:- cp:2:-)
  string(REPLACE ":" ";" case ${case})
  list(GET case 0 p)
  list(GET case 1 worlds)
  list(GET case 2 js)
  add_test(NAME conform_${p}_passes
    COMMAND ${conform_cmd} pass ${CMAKE_BINARY_DIR}/tessera/tessera-${p}.so ${worlds} ${js})
  set_tests_properties(conform_${p}_passes PROPERTIES LABELS "core;conform;${p}" TIMEOUT 300
    ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
endforeach()
# plugin:check:json:skips (dptwice's one-rank resume is not judged: its
# numerics failed; forgetful declares no key).
foreach(case dptwice:numerics:json:resume_other_topology leak:memory:- forgetful:resume:-:bad_value)
  string(REPLACE ":" ";" case ${case})
  list(GET case 0 p)
  list(GET case 1 check)
  list(GET case 2 js)
  list(LENGTH case n)
  set(skips)
  if(n GREATER 3)
    list(GET case 3 skips)
  endif()
  add_test(NAME conform_fails_${check}_of_${p}
    COMMAND ${conform_cmd} broken ${TESSERA_CONFORM_PLUGIN_DIR}/tessera-${p}.so ${check} ${js}
      ${skips})
  set_tests_properties(conform_fails_${check}_of_${p} PROPERTIES LABELS "core;conform"
    TIMEOUT 300 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
endforeach()
# A scheduler alone (tests/conform/gpipe_sched.c): recognised as one, its keys
# checked, the runs SKIP saying why (the core runs one scheduler, pp's).
add_test(NAME conform_scheduler_alone_is_recognised_and_its_runs_skipped
  COMMAND ${conform_cmd} pass ${TESSERA_CONFORM_PLUGIN_DIR}/tessera-gpipe_sched.so 2 -
    bad_value numerics memory comm resume resume_other_topology)
set_tests_properties(conform_scheduler_alone_is_recognised_and_its_runs_skipped PROPERTIES
  LABELS "core;conform" TIMEOUT 60 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
add_test(NAME conform_sdk_examples_pass COMMAND ${conform_cmd} examples ${CMAKE_BINARY_DIR}
  hello-plugin module-hook attention-provider token-dispatcher flex-dispatcher)
set_tests_properties(conform_sdk_examples_pass PROPERTIES LABELS "core;conform" TIMEOUT 600
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
# examples/hsdp (axes shard and replicate of its own) on 2 and 4 ranks, and
# beside tp 2 on 4 ranks.
add_test(NAME conform_hsdp_example_passes COMMAND ${conform_cmd} examples ${CMAKE_BINARY_DIR}
  hsdp)
set_tests_properties(conform_hsdp_example_passes PROPERTIES LABELS "core;conform;hsdp"
  TIMEOUT 300 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
add_test(NAME conform_bad_command_lines_and_abi
  COMMAND ${conform_cmd} cli ${CMAKE_BINARY_DIR}/tests/plugins)
set_tests_properties(conform_bad_command_lines_and_abi PROPERTIES LABELS "core;conform"
  TIMEOUT 120 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
