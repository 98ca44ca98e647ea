# The pp plugin's training tests (ctest -L pp): equivalence with one rank for
# every schedule on 2 and 4 stages and for dp x tp x pp = 2 x 2 x 2, the
# activation memory of 1F1B against GPipe, and the trace of an 8-rank run.
set(pp_tests ${CMAKE_CURRENT_SOURCE_DIR}/tests)
set(equiv ${PROJECT_SOURCE_DIR}/tests/cli/equivalence.sh)
set(pp2 "--set parallel.plugins=pp --set pp.size=2")
set(pp4 "--set parallel.plugins=pp --set pp.size=4")
set(il "--set pp.schedule=interleaved --set pp.virtual_stages=2")
# name | script | arguments after TESSERA SRC (equivalence: NP MICRO DTYPE TOL MODE SETS)
set(pp_cases
  "pp_equivalence_pp2_gpipe|${equiv}|2 4 fp32 1e-5 plain ${pp2} --set pp.schedule=gpipe"
  "pp_equivalence_pp2_1f1b|${equiv}|2 4 fp32 1e-5 plain ${pp2} --set pp.schedule=1f1b"
  "pp_equivalence_pp2_interleaved|${equiv}|2 4 fp32 1e-5 layers=4 ${pp2} ${il}"
  "pp_equivalence_pp4_gpipe|${equiv}|4 2 fp32 1e-5 layers=4 ${pp4} --set pp.schedule=gpipe"
  "pp_equivalence_pp4_1f1b|${equiv}|4 2 fp32 1e-5 layers=4 ${pp4} --set pp.schedule=1f1b"
  "pp_equivalence_pp4_interleaved|${equiv}|4 2 fp32 1e-5 layers=8 ${pp4} ${il}"
  "pp_equivalence_dp2_tp2_pp2|${equiv}|8 4 fp32 1e-5 plain --set parallel.plugins=dp,tp,pp --set tp.size=2 --set pp.size=2"
  "pp_equivalence_pp2_1f1b_bf16|${equiv}|2 4 bf16 1e-3 plain ${pp2} --set pp.schedule=1f1b"
  "pp_equivalence_pp2_interleaved_bf16|${equiv}|2 4 bf16 1e-3 layers=4 ${pp2} ${il}"
  # Activation recomputation under every schedule (one block per chunk:
  # groups of two need more), the same bits as none.
  "pp_recompute_pp2_1f1b_same_bits|${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh|2 4 fp32 1e-5 plain recompute=selective,full,full/block/1 ${pp2} --set pp.schedule=1f1b"
  "pp_recompute_pp2_gpipe_same_bits|${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh|2 4 fp32 1e-5 plain recompute=selective,full ${pp2} --set pp.schedule=gpipe"
  "pp_recompute_pp2_interleaved_same_bits|${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh|2 4 fp32 1e-5 layers=8 ${pp2} ${il}"
  "pp_recompute_pp2_interleaved_same_bits_bf16|${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh|2 4 bf16 1e-3 layers=4 recompute=selective,full ${pp2} ${il}"
  "pp_recompute_dp2_tp2_sp_pp2_same_bits|${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh|8 4 fp32 1e-5 layers=4 --set parallel.plugins=dp,tp,pp --set tp.size=2 --set pp.size=2 --set tp.sequence_parallel=true"
  "pp_bf16_traffic_is_half|${pp_tests}/bf16_wire.sh|"
  "pp_memory_1f1b_bounded_gpipe_grows|${pp_tests}/memory.sh|"
  "pp_trace_2x2x2_valid_on_all_ranks|${pp_tests}/trace.sh|")
tessera_script_tests(pp ${pp_cases})
