/*
 * cuda_emu.cc — the emulator's runtime (cuda_emu.h): the built-in index
 * variables, the shared-memory array, the block scheduler over coroutines.
 */
#include "cuda_emu.h"

#include <string.h>

emu_dim3 threadIdx, blockIdx, blockDim, gridDim;
float emu_lane_slot[1024];

/* The kernels' `extern __shared__ unsigned char smem[]`. */
#define EMU_SMEM_BYTES (228 * 1024) /* the most an sm_90 block may have */
alignas(128) unsigned char smem[EMU_SMEM_BYTES];

#define EMU_MAX_THREADS 1024
#define EMU_STACK (256 * 1024)

static ucontext_t emu_sched, emu_thr[EMU_MAX_THREADS];
static char *emu_stacks;
static unsigned emu_cur;
static int emu_done[EMU_MAX_THREADS];
static long emu_bars[EMU_MAX_THREADS];
static void (*emu_body)(void *);
static void *emu_arg;

void emu_fail(const char *what) {
    fprintf(stderr, "FAIL (emulated block %u,%u thread %u): %s\n", blockIdx.x, blockIdx.y,
            threadIdx.x, what);
    exit(1);
}

/* Stores queued by store_matrix_sync, written when a round of the block
 * ends (every thread at its next barrier, or done). */
struct emu_store {
    float *p;
    unsigned ldm;
    int col_major;
    float x[16][16];
};
static emu_store emu_pending[EMU_MAX_THREADS / 32];
static int emu_npending;

void emu_store_later(float *p, unsigned ldm, int col_major, const float (*x)[16]) {
    if (emu_npending == EMU_MAX_THREADS / 32) emu_fail("too many pending WMMA stores");
    emu_store *st = &emu_pending[emu_npending++];
    st->p = p;
    st->ldm = ldm;
    st->col_major = col_major;
    memcpy(st->x, x, sizeof st->x);
}

static void emu_flush_stores(void) {
    for (int i = 0; i < emu_npending; i++) {
        emu_store *st = &emu_pending[i];
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 16; c++)
                (st->col_major ? st->p[(size_t)c * st->ldm + r] : st->p[(size_t)r * st->ldm + c]) =
                    st->x[r][c];
    }
    emu_npending = 0;
}

void emu_barrier(void) {
    emu_bars[emu_cur]++;
    swapcontext(&emu_thr[emu_cur], &emu_sched);
}

static void emu_entry(void) {
    emu_body(emu_arg);
    emu_done[emu_cur] = 1;
}

void emu_launch(emu_dim3 grid, unsigned block, size_t smem_bytes, void (*body)(void *),
                void *arg) {
    if (block > EMU_MAX_THREADS || smem_bytes > EMU_SMEM_BYTES) emu_fail("launch too large");
    if (!emu_stacks) emu_stacks = (char *)malloc((size_t)EMU_MAX_THREADS * EMU_STACK);
    if (!emu_stacks) emu_fail("out of memory for the coroutine stacks");
    gridDim = grid;
    blockDim = {block, 1, 1};
    emu_body = body;
    emu_arg = arg;
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            blockIdx = {bx, by, 0};
            memset(smem, 0xff, smem_bytes); /* NaN in every f32 slot */
            for (unsigned t = 0; t < block; t++) {
                getcontext(&emu_thr[t]);
                emu_thr[t].uc_stack.ss_sp = emu_stacks + (size_t)t * EMU_STACK;
                emu_thr[t].uc_stack.ss_size = EMU_STACK;
                emu_thr[t].uc_link = &emu_sched;
                makecontext(&emu_thr[t], emu_entry, 0);
                emu_done[t] = 0;
                emu_bars[t] = 0;
            }
            for (long round = 0;; round++) {
                for (unsigned t = 0; t < block; t++) {
                    if (emu_done[t]) continue;
                    emu_cur = t;
                    threadIdx = {t, 0, 0};
                    swapcontext(&emu_sched, &emu_thr[t]);
                }
                emu_flush_stores();
                /* Every thread is now done or waiting at its (round+1)-th barrier. */
                unsigned done = 0;
                for (unsigned t = 0; t < block; t++) done += emu_done[t] != 0;
                if (done == block) break;
                if (done) emu_fail("the threads of a block passed different numbers of barriers");
                for (unsigned t = 0; t < block; t++)
                    if (emu_bars[t] != round + 1) emu_fail("barrier counts diverged");
            }
        }
}
