/*
 * dry_run.c — a dry run's life (dry_run.h): its region, its action.
 */
#include "dry_run_impl.h"

#include <stdlib.h>
#include <sys/mman.h>

/* 4 TiB of address space, reserved but never backed; halved while the
 * process has less left (dry runs on many threads at once), down to
 * 64 GiB. A build may ask for less (-DTS_DRY_RUN_REGION_LOG2=34: a
 * ThreadSanitizer build, whose shadow memory leaves no room for 4 TiB). */
#ifndef TS_DRY_RUN_REGION_LOG2
#define TS_DRY_RUN_REGION_LOG2 42
#endif
#define DRY_RUN_REGION ((size_t)1 << TS_DRY_RUN_REGION_LOG2)
#define DRY_RUN_REGION_MIN (DRY_RUN_REGION < ((size_t)1 << 36) ? DRY_RUN_REGION : (size_t)1 << 36)

ts_status ts_dry_run_create(ts_dry_run **out) {
    *out = NULL;
    ts_dry_run *dr = calloc(1, sizeof *dr);
    if (!dr) return ts_error(TS_ERR_NOMEM, "plan: out of memory");
    for (size_t bytes = DRY_RUN_REGION; bytes >= DRY_RUN_REGION_MIN; bytes /= 2) {
        void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) continue;
        dr->base = p;
        dr->region = bytes;
        break;
    }
    if (!dr->base) {
        free(dr);
        return ts_error(TS_ERR_NOMEM, "plan: cannot reserve the dry run's address space");
    }
    dr->epoch = 1;
    dr->action = -1;
    dr->tags[0] = "other";
    dr->ntags = 1;
    *out = dr;
    return TS_OK;
}

void ts_dry_run_destroy(ts_dry_run *dr) {
    if (!dr) return;
    plan_unbind(dr);
    munmap(dr->base, dr->region);
    free(dr->blocks);
    free(dr->sizes);
    free(dr);
}

int ts_dry_run_set_action(ts_dry_run *dr, int kind) {
    int was = dr->action;
    dr->action = kind;
    return was;
}

int ts_dry_run_action(const ts_dry_run *dr) {
    return dr->action;
}
