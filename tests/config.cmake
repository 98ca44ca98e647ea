# tests/config.cmake — registrations of the configuration and data tests.
# Both executables build from their sources directly so that they do not
# depend on the rest of the core library.
set(TESSERA_CORE_DIR ${PROJECT_SOURCE_DIR}/core)

add_executable(test_config ${PROJECT_SOURCE_DIR}/tests/test_config.c
  ${TESSERA_CORE_DIR}/config/config.c ${TESSERA_CORE_DIR}/base/status.c ${TESSERA_CORE_DIR}/base/alloc.c
  ${TESSERA_CORE_DIR}/base/file.c)
target_include_directories(test_config PRIVATE ${PROJECT_SOURCE_DIR}/include
  ${TESSERA_CORE_INCLUDE_DIRS})
target_link_libraries(test_config PRIVATE PkgConfig::INIH m)

add_executable(test_data ${PROJECT_SOURCE_DIR}/tests/test_data.c
  ${TESSERA_CORE_DIR}/train/data.c ${TESSERA_CORE_DIR}/base/rng.c ${TESSERA_CORE_DIR}/base/status.c
  ${TESSERA_CORE_DIR}/base/alloc.c ${TESSERA_CORE_DIR}/base/file.c)
target_include_directories(test_data PRIVATE ${PROJECT_SOURCE_DIR}/include
  ${TESSERA_CORE_INCLUDE_DIRS})
target_link_libraries(test_data PRIVATE m)

# One ctest entry per behaviour; the executable runs the case named by argv[1].
foreach(case
    parse_typed_getters_and_defaults
    set_overrides_and_where
    malformed_files_name_file_line_key
    malformed_set_is_rejected
    schema_registration)
  add_test(NAME config_${case} COMMAND test_config ${case})
  set_tests_properties(config_${case} PROPERTIES LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()

foreach(case
    synthetic_is_deterministic_per_seed
    synthetic_entropy_rate_matches_corpus
    windows_are_stream_slices
    ignore_token_masks_targets
    shuffle_is_a_permutation_per_epoch
    llmc_token_file_round_trip_and_errors
    text_source_reads_bytes)
  add_test(NAME data_${case} COMMAND test_data ${case})
  set_tests_properties(data_${case} PROPERTIES LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
