# core.cmake — tests of the whole single-rank model and of the `tessera`
# program: gradients, accumulation, initialisation, the LR schedule, memory
# accounting, bf16, learning, resume after SIGKILL, llm.c interop, bad input
# and a single-rank run without a launcher, which starts no MPI.
add_executable(test_model tests/test_model.c)
target_link_libraries(test_model PRIVATE tessera)
foreach(case grad accumulation init lr memory memory_cache grad_zero bf16 moe_grad
    moe_grad_dropping)
  add_test(NAME model_${case} COMMAND test_model ${case})
  set_tests_properties(model_${case} PROPERTIES LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()

foreach(script train_loss_falls bf16_close resume_sigkill llmc_roundtrip safetensors safetensors_moe
    hf_files safetensors_bad_input
    bad_input outputs alone_without_mpi
    checkpoint_dir checkpoint_legacy plan_summary bf16_memory threads_same_bits
    poison_uninit_same_bits omp_threads number_flags)
  add_test(NAME cli_${script}
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/${script}.sh $<TARGET_FILE:tessera_cli> ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli_${script} PROPERTIES LABELS core TIMEOUT 300
    ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()

# Activation recomputation on one rank: selective and full give the same
# bits as none (f32, bf16), and the memory ledger of both against the plan.
set(recompute ${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh)
tessera_script_tests(core
  "cli_recompute_same_bits|${recompute}|1 16 fp32 1e-5 layers=4 recompute=selective,full,full/uniform/2,full/block/1"
  "cli_recompute_same_bits_bf16|${recompute}|1 16 bf16 1e-3 layers=4 recompute=selective,full,full/uniform/3"
  "cli_recompute_memory|${PROJECT_SOURCE_DIR}/tests/cli/recompute_memory.sh|")

# Bad recomputation input: one line naming the key (needs the test plugin
# oldattn, an attention provider without release).
add_test(NAME cli_recompute_bad_input
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/recompute_bad_input.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/tests/plugins)
set_tests_properties(cli_recompute_bad_input PROPERTIES LABELS core TIMEOUT 300
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# tessera plan against Megatron-LM's rank groups (needs the test plugins).
add_test(NAME cli_plan_groups
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/plan_groups.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/tests/plugins)
set_tests_properties(cli_plan_groups PROPERTIES LABELS core TIMEOUT 120
  ENVIRONMENT "${TESSERA_TEST_ENV}")

# tessera plan --search and --cluster: bad cluster files, the search's
# properties, its predictions against plan's, calibration on 2 ranks.
add_test(NAME cli_plan_search
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/plan_search.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_plan_search PROPERTIES LABELS core TIMEOUT 300
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# plan --calibrate's cluster file and report --out written safely (a link
# planted at PATH.tmp, a FIFO or a link to one at PATH); [cluster] device
# counts past 2^31 and rates outside their ranges refused naming the key.
add_test(NAME cli_plan_cluster_bad_input
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/plan_cluster_bad_input.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_plan_cluster_bad_input PROPERTIES LABELS core TIMEOUT 120
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# Links planted at checkpoint_dir/tessera.lock or at reshard's DIR.tmp.dir
# are refused naming them; what they lead to is left alone.
add_test(NAME cli_checkpoint_planted_links
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/checkpoint_planted_links.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_checkpoint_planted_links PROPERTIES LABELS core TIMEOUT 120
  ENVIRONMENT "${TESSERA_TEST_ENV}")

# Recovery onto another topology (4 ranks, then 2).
add_test(NAME cli_resume_on_another_topology
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/resume_topology.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_resume_on_another_topology PROPERTIES LABELS core TIMEOUT 300
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# Ranks launched with different configurations are refused (3 ranks, MPMD).
add_test(NAME cli_config_agree
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/config_agree.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_config_agree PROPERTIES LABELS core TIMEOUT 300
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# Non-finite steps: skipped, counted, stopped after max_skipped_steps; one
# NaN gradient from the test plugin tessera-poison.so is skipped and training
# continues.
add_test(NAME cli_nonfinite
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/nonfinite.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/tests/plugins)
set_tests_properties(cli_nonfinite PROPERTIES LABELS core TIMEOUT 300
  ENVIRONMENT "${TESSERA_TEST_ENV}")

# Every callback of a plugin runs on its init's thread (the promise behind
# TS_PLUGIN_THREAD_LOCAL_STATE): the test plugin tessera-onethread.so fails
# any other, in runs with recomputation, evaluation and asynchronous
# checkpoints on one rank and beside dp and zero on two.
add_test(NAME cli_plugin_callbacks_run_on_the_init_thread
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/one_thread.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/tests/plugins)
set_tests_properties(cli_plugin_callbacks_run_on_the_init_thread PROPERTIES LABELS core
  TIMEOUT 600 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# Optimizer state cut over dp by the test plugin tessera-optshard.so (ZeRO
# stage 1 through the ABI 1.1 provider): bit-identical to dp, half the
# optimizer memory, checkpoints interchangeable with dp's, bad ranges refused.
add_test(NAME cli_optimizer_state_provider
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/optim_state.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/tests/plugins)
set_tests_properties(cli_optimizer_state_provider PROPERTIES LABELS core TIMEOUT 600
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# `tessera plan`'s communication per group and op equals what rank 0
# measured in two real steps: dp, tp, tp + SP, pp (1F1B), dp x tp x pp.
add_test(NAME cli_plan_matches_run
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/plan_matches_run.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR})
set_tests_properties(cli_plan_matches_run PROPERTIES LABELS core TIMEOUT 600
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# Load-time resharding (save on one topology, resume on another), a rank
# killed during a save, and a save slowed past [comm] timeout_s on one rank
# (within [train] checkpoint_timeout_s: the run goes on; past it: the job
# stops naming the rank, the previous checkpoint resumes), synchronous and
# background saves.
set(cli ${PROJECT_SOURCE_DIR}/tests/cli)
tessera_script_tests("core;checkpoint"
  "checkpoint_reshard_tp4_to_1|${cli}/reshard.sh|tp4_to_1"
  "checkpoint_reshard_zero3_dp4_to_tp2_pp2|${cli}/reshard.sh|zero3_dp4_to_tp2_pp2"
  "checkpoint_reshard_tp2_pp2_to_zero1_dp2|${cli}/reshard.sh|tp2_pp2_to_zero1_dp2"
  "checkpoint_reshard_ep4_to_ep2_other_dispatcher|${cli}/reshard.sh|ep4_to_ep2_other_dispatcher"
  "checkpoint_reshard_cp2_dp2_to_dp4|${cli}/reshard.sh|cp2_dp2_to_dp4"
  "checkpoint_reshard_pp2_interleaved_to_pp4|${cli}/reshard.sh|pp2_interleaved_to_pp4"
  "checkpoint_kill_during_save|${cli}/ckpt_kill.sh|"
  "checkpoint_slow_write_not_a_comm_timeout|${cli}/ckpt_slow_write.sh|")

# tessera report (the HTML of a pipeline run and of one rank); the held-out
# loss on dp, tp + SP, pp and dp x pp against one rank; tessera sample and
# [train] sample_every.
tessera_script_tests(core
  "cli_report|${cli}/report.sh|"
  "cli_eval|${cli}/eval.sh|"
  "cli_sample|${cli}/sample.sh|")

# tessera verify: the four ledgers on dp, tp, pp, dp x tp, and a broken
# configuration (the test plugin skew).
add_test(NAME cli_verify
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/verify.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/tests/plugins)
set_tests_properties(cli_verify PROPERTIES LABELS core TIMEOUT 900
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")

# tessera verify with its default launcher on more ranks than cores (tiny.ini
# on dp 4), a --launcher taken as given, and failed launches reported in the
# launcher's own words.
tessera_script_tests(core
  "cli_verify_launcher|${cli}/verify_launcher.sh|")

