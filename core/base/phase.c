/*
 * phase.c — the recomputing phase (phase.h), per thread.
 */
#include "phase.h"

static _Thread_local int phase_recomputing;

int ts_phase_recompute(int on) {
    int was = phase_recomputing;
    phase_recomputing = on;
    return was;
}

int ts_phase_recomputing(void) {
    return phase_recomputing;
}
