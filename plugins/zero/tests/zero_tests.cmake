# The zero plugin's suite: ctest -L zero.
set(zero_tests ${CMAKE_CURRENT_SOURCE_DIR}/tests)
set(equiv ${PROJECT_SOURCE_DIR}/tests/cli/equivalence.sh)
set(zero "--set parallel.plugins=dp,zero --set zero.stage=")
set(recompute ${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh)
# name | script | arguments after TESSERA SRC (equivalence: NP MICRO DTYPE TOL MODE SETS)
set(zero_cases)
foreach(stage 1 2 3)
  list(APPEND zero_cases
    "zero_stage${stage}_dp2_matches_one_rank|${equiv}|2 8 fp32 1e-5 plain ${zero}${stage}"
    "zero_stage${stage}_dp4_matches_one_rank|${equiv}|4 4 fp32 1e-5 plain ${zero}${stage}"
    "zero_stage${stage}_dp8_matches_one_rank|${equiv}|8 2 fp32 1e-5 plain ${zero}${stage}"
    "zero_stage${stage}_dp2_accumulation|${equiv}|2 4 fp32 1e-5 plain ${zero}${stage}"
    "zero_stage${stage}_dp2_bf16|${equiv}|2 8 bf16 1e-3 plain ${zero}${stage}"
    "zero_stage${stage}_dp2_pp2|${equiv}|4 4 fp32 1e-5 plain --set parallel.plugins=dp,pp,zero --set pp.size=2 --set zero.stage=${stage}")
endforeach()
list(APPEND zero_cases
  "zero_stage3_dp2_tp2_sequence_parallel|${equiv}|4 8 fp32 1e-5 plain --set parallel.plugins=dp,tp,zero --set tp.size=2 --set tp.sequence_parallel=true --set zero.stage=3"
  "zero_stage3_dp2_kept_after_forward_prefetch2|${equiv}|2 4 fp32 1e-5 plain ${zero}3 --set zero.reshard_after_forward=false --set zero.prefetch=2"
  "zero_stage3_dp2_no_prefetch_no_overlap|${equiv}|2 8 fp32 1e-5 plain ${zero}3 --set zero.prefetch=0 --set zero.overlap=false"
  "zero_stage1_dp2_masked_tokens|${equiv}|2 8 fp32 1e-5 masked ${zero}1"
  "zero_stage1_recompute_same_bits|${recompute}|2 8 fp32 1e-5 plain ${zero}1"
  "zero_stage2_recompute_same_bits|${recompute}|2 8 fp32 1e-5 plain ${zero}2"
  "zero_stage3_recompute_same_bits|${recompute}|2 8 fp32 1e-5 plain ${zero}3"
  "zero_stage3_kept_after_forward_recompute_same_bits|${recompute}|2 4 fp32 1e-5 plain ${zero}3 --set zero.reshard_after_forward=false --set zero.prefetch=2"
  "zero_stage3_recompute_same_bits_bf16|${recompute}|2 8 bf16 1e-3 plain ${zero}3"
  "zero_memory_matches_formula_and_plan|${zero_tests}/memory.sh|"
  "zero_communication_matches_formula_and_plan|${zero_tests}/comm.sh|"
  "zero_checkpoints_resume_exactly_and_across|${zero_tests}/checkpoint.sh|"
  "zero_plan_of_70b_parameters|${zero_tests}/plan_70b.sh|"
  "zero_bad_input_is_refused|${zero_tests}/bad_input.sh|")
tessera_script_tests(zero ${zero_cases})

# Offload on emulated GPUs (tests/cuda_emu): the optimizer state and its
# update in host memory, two ranks against one CPU rank (1e-4: GPU against
# CPU, as every emulated training test).
if(TARGET tessera_emu_cli AND NOT TESSERA_SANITIZE)
  foreach(stage 1 3)
    add_test(NAME zero_stage${stage}_offload_emulated_gpu
      COMMAND bash ${equiv} $<TARGET_FILE:tessera_emu_cli> ${PROJECT_SOURCE_DIR}
        2 8 fp32 1e-4 plain --set parallel.plugins=dp,zero --set zero.stage=${stage}
        --set zero.offload=cpu --set train.device=cuda)
    set_tests_properties(zero_stage${stage}_offload_emulated_gpu PROPERTIES
      LABELS "zero;emulated" TIMEOUT 900 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
  endforeach()
endif()
