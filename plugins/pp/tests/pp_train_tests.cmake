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

# Zero-bubble schedules: equivalence with one rank (20 steps, f32 within
# 1e-5) for zb_h1 and zb_v at pp 2 and 4 with m = p and m = 2p (the global
# batch of 16 over micro-batches of 16 / (dp m)), with dp, with tp + SP,
# with zero 1-3, cp and ep, and in bf16 (1e-3); and zb_h1 against 1F1B on
# the same topology bit for bit (the same reductions in the same order: W
# runs in micro-batch order, each product's weight gradient with the kernel
# the whole backward calls). zb_v against interleaved is not bit for bit:
# V places the embedding and the LM head on rank 0, so wte's two gradients
# add into one buffer there instead of being summed over the tie group.
set(zbh1 "--set pp.schedule=zb_h1")
set(zbv "--set pp.schedule=zb_v --set pp.virtual_stages=2")
set(same ${PROJECT_SOURCE_DIR}/tests/cli/same_bits.sh)
set(zb_cases
  "pp_zb_h1_pp2_m2_matches_one_rank|${equiv}|2 8 fp32 1e-5 plain ${pp2} ${zbh1}"
  "pp_zb_h1_pp2_m4_matches_one_rank|${equiv}|2 4 fp32 1e-5 plain ${pp2} ${zbh1}"
  "pp_zb_h1_pp4_m4_matches_one_rank|${equiv}|4 4 fp32 1e-5 layers=4 ${pp4} ${zbh1}"
  "pp_zb_h1_pp4_m8_matches_one_rank|${equiv}|4 2 fp32 1e-5 layers=4 ${pp4} ${zbh1}"
  "pp_zb_v_pp2_m2_matches_one_rank|${equiv}|2 8 fp32 1e-5 layers=4 ${pp2} ${zbv}"
  "pp_zb_v_pp2_m4_matches_one_rank|${equiv}|2 4 fp32 1e-5 layers=4 ${pp2} ${zbv}"
  "pp_zb_v_pp4_m4_matches_one_rank|${equiv}|4 4 fp32 1e-5 layers=8 ${pp4} ${zbv}"
  "pp_zb_v_pp4_m8_matches_one_rank|${equiv}|4 2 fp32 1e-5 layers=8 ${pp4} ${zbv}"
  "pp_zb_h1_dp2_pp2_matches_one_rank|${equiv}|4 4 fp32 1e-5 plain --set parallel.plugins=dp,pp --set pp.size=2 ${zbh1}"
  "pp_zb_v_dp2_pp2_matches_one_rank|${equiv}|4 4 fp32 1e-5 layers=4 --set parallel.plugins=dp,pp --set pp.size=2 ${zbv}"
  "pp_zb_h1_tp2_sp_pp2_matches_one_rank|${equiv}|4 8 fp32 1e-5 plain --set parallel.plugins=tp,pp --set tp.size=2 --set tp.sequence_parallel=true --set pp.size=2 ${zbh1}"
  "pp_zb_v_tp2_sp_pp2_matches_one_rank|${equiv}|4 8 fp32 1e-5 layers=4 --set parallel.plugins=tp,pp --set tp.size=2 --set tp.sequence_parallel=true --set pp.size=2 ${zbv}"
  "pp_zb_h1_zero1_dp2_pp2_matches_one_rank|${equiv}|4 4 fp32 1e-5 plain --set parallel.plugins=dp,pp,zero --set zero.stage=1 --set pp.size=2 ${zbh1}"
  "pp_zb_v_zero2_dp2_pp2_matches_one_rank|${equiv}|4 4 fp32 1e-5 layers=4 --set parallel.plugins=dp,pp,zero --set zero.stage=2 --set pp.size=2 ${zbv}"
  "pp_zb_h1_zero3_dp2_pp2_matches_one_rank|${equiv}|4 4 fp32 1e-5 plain --set parallel.plugins=dp,pp,zero --set zero.stage=3 --set pp.size=2 ${zbh1}"
  "pp_zb_h1_cp2_pp2_matches_one_rank|${equiv}|4 8 fp32 1e-5 plain --set parallel.plugins=cp,pp --set cp.size=2 --set pp.size=2 ${zbh1}"
  "pp_zb_h1_ep2_pp2_matches_one_rank|${equiv}|4 8 fp32 1e-5 set=model.experts=4,model.top_k=2,model.aux_loss_coeff=0.01,model.z_loss_coeff=0.001 --set parallel.plugins=dp,pp,ep --set pp.size=2 --set ep.size=2 ${zbh1}"
  "pp_zb_h1_pp2_bf16_matches_one_rank|${equiv}|2 4 bf16 1e-3 plain ${pp2} ${zbh1}"
  "pp_zb_v_pp2_bf16_matches_one_rank|${equiv}|2 4 bf16 1e-3 layers=4 ${pp2} ${zbv}"
  "pp_zb_h1_pp2_same_bits_as_1f1b|${same}|2 4 fp32 plain ${pp2} -- --set pp.schedule=1f1b -- ${zbh1}"
  "pp_zb_h1_pp4_same_bits_as_1f1b|${same}|4 2 fp32 layers=4 ${pp4} -- --set pp.schedule=1f1b -- ${zbh1}"
  "pp_zb_h1_dp2_pp2_same_bits_as_1f1b|${same}|4 4 fp32 plain --set parallel.plugins=dp,pp --set pp.size=2 -- --set pp.schedule=1f1b -- ${zbh1}"
  "pp_zb_h1_tp2_sp_pp2_same_bits_as_1f1b|${same}|4 8 fp32 plain --set parallel.plugins=tp,pp --set pp.size=2 --set tp.size=2 --set tp.sequence_parallel=true -- --set pp.schedule=1f1b -- ${zbh1}"
  "pp_schedule_file_runs_and_bad_files_are_refused|${pp_tests}/schedule_file.sh|"
  "pp_zero_bubble_memory_plan_and_1f1b_plus_w_state|${pp_tests}/zb_memory.sh|")
tessera_script_tests(pp ${zb_cases})
