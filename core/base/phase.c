/*
 * phase.c — the recomputing phase and the action running (phase.h).
 */
#include "phase.h"

static int phase_recomputing;
static int phase_action = -1;

int ts_phase_recompute(int on) {
    int was = phase_recomputing;
    phase_recomputing = on;
    return was;
}

int ts_phase_recomputing(void) {
    return phase_recomputing;
}

int ts_phase_set_action(int kind) {
    int was = phase_action;
    phase_action = kind;
    return was;
}

int ts_phase_action(void) {
    return phase_action;
}
