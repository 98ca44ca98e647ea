/*
 * schedule.c — the default one-stage schedule and schedule printing.
 */
#include "schedule.h"

#include <stdlib.h>

ts_status ts_schedule_default(int micro_batches, ts_schedule *out) {
    if (micro_batches < 1)
        return ts_error(TS_ERR_INVALID, "schedule: %d micro-batches", micro_batches);
    out->nactions = 2 * micro_batches + 1;
    out->actions = calloc((size_t)out->nactions, sizeof *out->actions);
    if (!out->actions) return ts_error(TS_ERR_NOMEM, "schedule: out of memory");
    int k = 0;
    for (int mb = 0; mb < micro_batches; mb++) {
        out->actions[k++] = (ts_action){TS_ACT_FORWARD, mb, 0, -1};
        out->actions[k++] = (ts_action){TS_ACT_BACKWARD, mb, 0, -1};
    }
    out->actions[k] = (ts_action){TS_ACT_OPTIMIZER_STEP, -1, 0, -1};
    return TS_OK;
}

void ts_schedule_free(ts_schedule *s) {
    free(s->actions);
    s->actions = NULL;
    s->nactions = 0;
}

void ts_schedule_print(const ts_schedule *s, FILE *f) {
    static const char *tag[] = {"F", "B", "SA", "RA", "SG", "RG", "OPT"};
    for (int i = 0; i < s->nactions; i++) {
        const ts_action *a = &s->actions[i];
        if (a->kind == TS_ACT_OPTIMIZER_STEP)
            fprintf(f, "%sOPT", i ? " " : "");
        else
            fprintf(f, "%s%s%d", i ? " " : "", tag[a->kind], a->mb);
    }
    fputc('\n', f);
}
