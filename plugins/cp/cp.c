/*
 * cp.c — tessera-cp.so: context parallelism. Every sequence is cut along its
 * length over the `cp` axis through the whole network (each rank holds
 * T/cp tokens of every sequence in every layer), and the attention, the only
 * layer that mixes tokens, exchanges keys and values across the cp ranks.
 * The weights stay whole on every cp rank; their gradients are partial over
 * cp and summed over dp x cp (dp's reduction covers the dp-cp group, or the
 * core sums them).
 *
 * [cp] algorithm says how the attention sees every key:
 *  ring        the K/V blocks travel around the cp ring (non-blocking send
 *              and recv of the next block while the block in hand is
 *              attended); each block's partial result is merged with the
 *              others through its log-sum-exp; blocks entirely above the
 *              causal diagonal are skipped. Backward sends K/V around the
 *              ring again with the dK/dV accumulated so far, which arrive
 *              home after the last hop (Liu et al., "Ring Attention with
 *              Blockwise Transformers", 2023; Megatron-LM / Transformer
 *              Engine's context parallelism).
 *  all_gather  K/V of every rank gathered, the local queries attend to
 *              them; backward gathers them again and reduce-scatters dK/dV
 *              (Llama 3's choice).
 *  all_to_all  DeepSpeed-Ulysses (Jacobs et al., 2023): q, k, v are
 *              exchanged from sequence-cut to head-cut, each rank attends
 *              whole sequences for heads/cp of the heads, and the output
 *              is exchanged back; the heads on a rank must divide by cp.
 *
 * load_balance = true cuts each sequence in 2*cp chunks and gives rank i
 * chunks i and 2*cp-1-i (the core reads the data in that order,
 * TS_SEQUENCE_MIRRORED), so every rank computes the same causal attention
 * work; false: contiguous parts, rank cp-1 doing the most.
 *
 * Every attention is computed block by block by the core's kernels
 * (host->kernels->attention_block_*: a causal offset in, the log-sum-exp out); no
 * rank holds the scores of a whole sequence.
 *
 * In bf16 runs keys and values travel in two bytes (they are bf16 values:
 * the model rounds q, k, v, so the exchange is exact), and so do the
 * all-to-all's q, k, v and its output (which the model rounds to bf16 on
 * arrival anyway); gradients (dK/dV accumulators, dout, dqkv) stay f32,
 * unless the run sends them in bf16 too ([train] partial_dtype = bf16,
 * args->grads_bf16).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/plugin.h"

static const ts_plugin_key cp_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "1", 1, 1 << 16, NULL, "ranks that share each sequence (cp)"},
    {"algorithm", TS_PLUGIN_KEY_ENUM, "ring", 1, 0, "ring|all_gather|all_to_all",
     "how the attention sees the keys of the other ranks"},
    {"load_balance", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL,
     "2*cp chunks, rank i holding chunks i and 2*cp-1-i (equal causal work)"},
    {"overlap", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL,
     "ring: exchange the next block while attending to this one (false: first "
     "exchange, then attend)"},
};

typedef enum cp_algorithm { CP_RING, CP_ALL_GATHER, CP_ALL_TO_ALL } cp_algorithm;

/* Tags of the ring's messages: phase * CP_TAG_STRIDE + step. */
#define CP_TAG_STRIDE 4096
#define CP_TAG_FWD_KV 1
#define CP_TAG_BWD_KV 2
#define CP_TAG_BWD_DKV 3

static _Thread_local struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
    int size;
    cp_algorithm algo;
    int balance, overlap;
    /* This step's counts: score elements computed (per sequence and head),
     * chunk blocks computed and skipped, time waiting for the ring. */
    int64_t scores, blocks, skipped;
    double wait_ms;
} cp;

static double cp_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---------------------------------------------------------------------------
 * Which rows a rank holds
 * ------------------------------------------------------------------------- */

/* The chunks of every sequence a rank holds: n of L rows, starting at
 * positions pos[0..n-1], rows c*L .. c*L+L-1 of its part. */
typedef struct cp_chunks {
    int n, L;
    int pos[2];
} cp_chunks;

static cp_chunks cp_chunks_of(int rank, int ranks, int T) {
    cp_chunks c = {cp.balance ? 2 : 1, 0, {0, 0}};
    c.L = T / (ranks * c.n);
    c.pos[0] = rank * c.L;
    c.pos[1] = (2 * ranks - 1 - rank) * c.L;
    return c;
}

/* Score elements a block of Lq queries at offset `off` from its Lk keys
 * computes (key j visible to query i iff j <= i + off). */
static int64_t cp_visible(int Lq, int Lk, int64_t off) {
    int64_t n = 0;
    for (int i = 0; i < Lq; i++) {
        int64_t v = i + off + 1;
        n += v <= 0 ? 0 : v >= Lk ? Lk : v;
    }
    return n;
}

/* ---------------------------------------------------------------------------
 * Attention of chunks against chunks
 * ------------------------------------------------------------------------- */

/* The rows of one side of a block computation: B sequences of T rows (row
 * stride `stride` floats), cut in the chunks `ch`. */
typedef struct cp_rows {
    const cp_chunks *ch;
    int T, stride;
} cp_rows;

/* Forward: the queries of q (rows qr) attend to the keys k / values v
 * (rows kr). out (stride C, rows qr) and lse ((B, chunks, NH, L)) hold the
 * merged result so far; have[c] says whether query chunk c has one yet.
 * tmp: L * C + NH * L floats. Fully masked chunk pairs are skipped. */
static ts_status cp_attend(const float *q, cp_rows qr, const float *k, const float *v, cp_rows kr,
                           float *out, float *lse, int *have, float *tmp, int B, int C, int NH) {
    const cp_chunks *qc = qr.ch, *kc = kr.ch;
    int L = qc->L;
    for (int iq = 0; iq < qc->n; iq++)
        for (int ik = 0; ik < kc->n; ik++) {
            int64_t off = (int64_t)qc->pos[iq] - kc->pos[ik];
            if (off <= -L) {
                cp.skipped++;
                continue;
            }
            cp.blocks++;
            cp.scores += cp_visible(L, kc->L, off) * NH * B;
            for (int b = 0; b < B; b++) {
                const float *qb = q + ((size_t)b * qr.T + (size_t)iq * L) * qr.stride;
                const float *kb = k + ((size_t)b * kr.T + (size_t)ik * kc->L) * kr.stride;
                const float *vb = v + ((size_t)b * kr.T + (size_t)ik * kc->L) * kr.stride;
                float *ob = out + ((size_t)b * qr.T + (size_t)iq * L) * C;
                float *lb = lse + ((size_t)b * qc->n + iq) * NH * L;
                if (!have[iq]) {
                    TS_TRY(cp.host->kernels->attention_block_forward(cp.ctx, ob, lb, qb, kb, vb, 1,
                                                                     L, kc->L, C, NH, qr.stride,
                                                                     kr.stride, C, off));
                    continue;
                }
                float *to = tmp, *tl = tmp + (size_t)L * C;
                TS_TRY(cp.host->kernels->attention_block_forward(
                    cp.ctx, to, tl, qb, kb, vb, 1, L, kc->L, C, NH, qr.stride, kr.stride, C, off));
                TS_TRY(cp.host->kernels->attention_block_merge(cp.ctx, ob, lb, to, tl, 1, L, C, NH,
                                                               C));
            }
            have[iq] = 1;
        }
    return TS_OK;
}

/* Backward of cp_attend: accumulates dq (stride qr.stride) and dk, dv
 * (stride kr.stride) from the final out and lse and dout (stride C). */
static ts_status cp_attend_backward(const float *q, float *dq, cp_rows qr, const float *k,
                                    const float *v, float *dk, float *dv, cp_rows kr,
                                    const float *out, const float *dout, const float *lse, int B,
                                    int C, int NH) {
    const cp_chunks *qc = qr.ch, *kc = kr.ch;
    int L = qc->L;
    for (int iq = 0; iq < qc->n; iq++)
        for (int ik = 0; ik < kc->n; ik++) {
            int64_t off = (int64_t)qc->pos[iq] - kc->pos[ik];
            if (off <= -L) continue;
            for (int b = 0; b < B; b++) {
                size_t qrow = (size_t)b * qr.T + (size_t)iq * L;
                size_t krow = (size_t)b * kr.T + (size_t)ik * kc->L;
                TS_TRY(cp.host->kernels->attention_block_backward(
                    cp.ctx, dq + qrow * qr.stride, dk + krow * kr.stride, dv + krow * kr.stride,
                    q + qrow * qr.stride, k + krow * kr.stride, v + krow * kr.stride,
                    out + qrow * C, dout + qrow * C, lse + ((size_t)b * qc->n + iq) * NH * L, 1, L,
                    kc->L, C, NH, qr.stride, kr.stride, C, off));
            }
        }
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------- */

/* What the forward keeps for the backward of one micro-batch. */
typedef struct cp_saved {
    float *lse; /* ring, all_gather: (B, chunks, NH, L); all_to_all: (B, NH/cp, T) */
    float *qkv; /* all_to_all: whole sequences of this rank's heads (B, T, 3C/cp) */
    float *out; /* all_to_all: (B, T, C/cp)                                   */
} cp_saved;

static void *cp_alloc(ts_mem_category cat, size_t floats) {
    return cp.host->dev->alloc(cp.ctx, cat, (floats ? floats : 1) * sizeof(float));
}

static void cp_free_all(float **p, int n) {
    for (int i = 0; i < n; i++) {
        cp.host->dev->free(cp.ctx, p[i]);
        p[i] = NULL;
    }
}

/* Keys, values and attention outputs on the wire: bf16 in bf16 runs (the
 * host can convert), else f32. */
static int cp_wire_bf16(const ts_plugin_attention_args *a) {
    return a->bf16 && TS_DEVICE_HAS(cp.host->dev, convert);
}

static ts_dtype cp_wire_dtype(const ts_plugin_attention_args *a) {
    return cp_wire_bf16(a) ? TS_BF16 : TS_F32;
}

/* Gradients on the wire in bf16 ([train] partial_dtype = bf16). */
static int cp_grads_bf16(const ts_plugin_attention_args *a) {
    return a->struct_size >= offsetof(ts_plugin_attention_args, grads_bf16) + sizeof(int) &&
           a->grads_bf16 && TS_DEVICE_HAS(cp.host->dev, convert);
}

/* Room for n wire elements. */
static void *cp_alloc_wire(const ts_plugin_attention_args *a, ts_mem_category cat, size_t n) {
    return cp_alloc(cat, cp_wire_bf16(a) ? (n + 1) / 2 : n);
}

/* f32 -> bf16 wire and back (n elements). */
static ts_status cp_to_wire(void *wire, const float *x, size_t n) {
    return cp.host->dev->convert(cp.ctx, wire, TS_BF16, x, TS_F32, n);
}

static ts_status cp_from_wire(float *x, const void *wire, size_t n) {
    return cp.host->dev->convert(cp.ctx, x, TS_F32, wire, TS_BF16, n);
}

/* k and v of qkv (B*T rows of 3C) packed as rows of 2C. */
static ts_status cp_pack_kv(float *kv, const float *qkv, size_t rows, int C) {
    return cp.host->dev->copy_2d(cp.ctx, kv, 2 * C * sizeof(float), qkv + C, 3 * C * sizeof(float),
                                 2 * C * sizeof(float), rows);
}

/* dqkv's k and v columns += dkv (rows of 2C), through `work` (rows * 3C). */
static ts_status cp_add_dkv(float *dqkv, const float *dkv, float *work, size_t rows, int C) {
    TS_TRY(cp.host->dev->zero(cp.ctx, work, rows * 3 * C * sizeof(float)));
    TS_TRY(cp.host->dev->copy_2d(cp.ctx, work + C, 3 * C * sizeof(float), dkv,
                                 2 * C * sizeof(float), 2 * C * sizeof(float), rows));
    return cp.host->dev->add(cp.ctx, dqkv, work, rows * 3 * C);
}

static ts_status cp_wait(ts_comm_request **req) {
    if (!*req) return TS_OK;
    double t0 = cp_now_ms();
    ts_status st = cp.host->comms->wait(*req);
    *req = NULL;
    cp.wait_ms += cp_now_ms() - t0;
    return st;
}

/* ---------------------------------------------------------------------------
 * ring
 * ------------------------------------------------------------------------- */

static ts_status cp_ring_forward(ts_plugin_attention_args *a, cp_saved *s, const cp_chunks *mine) {
    int n = cp.host->comms->size(a->comm), r = cp.host->comms->rank(a->comm);
    int B = a->B, Tl = a->T_local, C = a->C, NH = a->NH, have[2] = {0, 0};
    size_t kvn = (size_t)B * Tl * 2 * C;
    ts_dtype wt = cp_wire_dtype(a);
    int bf = wt == TS_BF16;
    /* The blocks travelling (wire[2]); in bf16 the block in hand in f32. */
    float *buf[4] = {cp_alloc_wire(a, TS_MEM_COMM, kvn), cp_alloc_wire(a, TS_MEM_COMM, kvn),
                     cp_alloc(TS_MEM_ACTS, (size_t)mine->L * (C + NH)),
                     bf ? cp_alloc(TS_MEM_COMM, kvn) : NULL};
    float **wire = buf;
    ts_status st = buf[0] && buf[1] && buf[2] && (!bf || buf[3]) ? TS_OK : TS_ERR_NOMEM;
    if (!st) st = cp_pack_kv(bf ? buf[3] : wire[0], a->qkv, (size_t)B * Tl, C);
    if (!st && bf && n > 1) st = cp_to_wire(wire[0], buf[3], kvn);
    cp_rows qr = {mine, Tl, 3 * C};
    for (int step = 0, cur = 0; !st && step < n; step++, cur ^= 1) {
        ts_comm_request *recv = NULL, *send = NULL;
        int tag = CP_TAG_FWD_KV * CP_TAG_STRIDE + step;
        if (step < n - 1) {
            st = cp.host->comms->recv_start(a->comm, wire[cur ^ 1], kvn, wt, (r + n - 1) % n, tag,
                                            &recv);
            if (!st)
                st = cp.host->comms->send_start(a->comm, wire[cur], kvn, wt, (r + 1) % n, tag,
                                                &send);
            if (!st && !cp.overlap) st = cp_wait(&recv);
            if (!st && !cp.overlap) st = cp_wait(&send);
        }
        cp_chunks theirs = cp_chunks_of((r + n - step) % n, n, a->T);
        cp_rows kr = {&theirs, Tl, 2 * C};
        float *kv = bf ? buf[3] : wire[cur];
        if (!st && bf && step > 0) st = cp_from_wire(kv, wire[cur], kvn);
        if (!st) st = cp_attend(a->qkv, qr, kv, kv + C, kr, a->out, s->lse, have, buf[2], B, C, NH);
        ts_status w = cp_wait(&recv), w2 = cp_wait(&send);
        if (!st) st = w ? w : w2;
    }
    cp_free_all(buf, 4);
    return st;
}

static ts_status cp_ring_backward(ts_plugin_attention_args *a, cp_saved *s, const cp_chunks *mine) {
    int n = cp.host->comms->size(a->comm), r = cp.host->comms->rank(a->comm);
    int B = a->B, Tl = a->T_local, C = a->C, NH = a->NH;
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    size_t rows = (size_t)B * Tl, kvn = rows * 2 * C;
    /* kv[2]: the block in hand and the next; dkv[2]: the accumulators this
     * rank sends on (alternating, so one may still be in flight); in: the
     * accumulator arriving from the previous rank. */
    ts_dtype wt = cp_wire_dtype(a);
    int bf = wt == TS_BF16;
    float *buf[7] = {cp_alloc_wire(a, TS_MEM_COMM, kvn), cp_alloc_wire(a, TS_MEM_COMM, kvn),
                     cp_alloc(TS_MEM_COMM, kvn),         cp_alloc(TS_MEM_COMM, kvn),
                     cp_alloc(TS_MEM_COMM, kvn),         cp_alloc(TS_MEM_COMM, rows * 3 * C),
                     bf ? cp_alloc(TS_MEM_COMM, kvn) : NULL};
    /* kv: the blocks travelling (in bf16 runs the block in hand in f32 is
     * buf[6]); the rest f32. */
    float **kv = buf, **dkv = buf + 2, *in = buf[4], *work = buf[5];
    ts_status st = TS_OK;
    for (int i = 0; i < 6 + bf; i++)
        if (!buf[i]) st = TS_ERR_NOMEM;
    /* With gradients in bf16 the accumulators travel through their own
     * wires: the one arriving and the two this rank sends. */
    int gb = cp_grads_bf16(a);
    ts_dtype gt = gb ? TS_BF16 : TS_F32;
    float *gwire[3] = {NULL, NULL, NULL};
    for (int i = 0; gb && i < 3; i++)
        if (!(gwire[i] = cp_alloc(TS_MEM_COMM, (kvn + 1) / 2))) st = TS_ERR_NOMEM;
    void *din = gb ? (void *)gwire[2] : (void *)in;
    ts_comm_request *dsend[2] = {NULL, NULL}, *drecv = NULL;
    if (!st) st = cp_pack_kv(bf ? buf[6] : kv[0], a->qkv, rows, C);
    if (!st && bf && n > 1) st = cp_to_wire(kv[0], buf[6], kvn);
    cp_rows qr = {mine, Tl, 3 * C};
    for (int step = 0, cur = 0; !st && step < n; step++, cur ^= 1) {
        ts_comm_request *recv = NULL, *send = NULL;
        int tag = CP_TAG_BWD_KV * CP_TAG_STRIDE + step;
        if (step < n - 1) {
            st = cp.host->comms->recv_start(a->comm, kv[cur ^ 1], kvn, wt, prev, tag, &recv);
            if (!st) st = cp.host->comms->send_start(a->comm, kv[cur], kvn, wt, next, tag, &send);
        }
        /* The accumulator of this block so far (the ranks before us). */
        if (!st && step >= 2)
            st = cp.host->comms->recv_start(a->comm, din, kvn, gt, prev,
                                            CP_TAG_BWD_DKV * CP_TAG_STRIDE + step, &drecv);
        if (!st && !cp.overlap) st = cp_wait(&recv);
        if (!st && !cp.overlap) st = cp_wait(&send);
        if (!st && !cp.overlap) st = cp_wait(&drecv);
        cp_chunks theirs = cp_chunks_of((r + n - step) % n, n, a->T);
        if (!st && step == 0) { /* our own keys: their gradient goes home at once */
            cp_rows kr = {&theirs, Tl, 3 * C};
            st = cp_attend_backward(a->qkv, a->dqkv, qr, a->qkv + C, a->qkv + 2 * C, a->dqkv + C,
                                    a->dqkv + 2 * C, kr, a->out, a->dout, s->lse, B, C, NH);
        } else if (!st) {
            cp_rows kr = {&theirs, Tl, 2 * C};
            float *hand = bf ? buf[6] : kv[cur];
            st = cp_wait(&dsend[cur]); /* the send that used this accumulator */
            if (!st) st = cp.host->dev->zero(cp.ctx, dkv[cur], kvn * sizeof(float));
            if (!st && bf) st = cp_from_wire(hand, kv[cur], kvn);
            if (!st)
                st = cp_attend_backward(a->qkv, a->dqkv, qr, hand, hand + C, dkv[cur],
                                        dkv[cur] + C, kr, a->out, a->dout, s->lse, B, C, NH);
            if (!st) st = cp_wait(&drecv);
            if (!st && step >= 2 && gb) st = cp_from_wire(in, din, kvn);
            if (!st && step >= 2) st = cp.host->dev->add(cp.ctx, dkv[cur], in, kvn);
            /* On to the next rank: the last hop takes it home. */
            void *out = dkv[cur];
            if (!st && gb) st = cp_to_wire(out = gwire[cur], dkv[cur], kvn);
            if (!st)
                st = cp.host->comms->send_start(a->comm, out, kvn, gt, next,
                                                CP_TAG_BWD_DKV * CP_TAG_STRIDE + step + 1,
                                                &dsend[cur]);
        }
        ts_status w = cp_wait(&recv), w2 = cp_wait(&send);
        if (!st) st = w ? w : w2;
    }
    /* Our keys' accumulator, home from the last rank that used them. */
    if (!st && n > 1)
        st = cp.host->comms->recv(a->comm, din, kvn, gt, prev, CP_TAG_BWD_DKV * CP_TAG_STRIDE + n);
    if (!st && n > 1 && gb) st = cp_from_wire(in, din, kvn);
    ts_status w = cp_wait(&dsend[0]), w2 = cp_wait(&dsend[1]), w3 = cp_wait(&drecv);
    if (!st) st = w ? w : w2 ? w2 : w3;
    if (!st && n > 1) st = cp_add_dkv(a->dqkv, in, work, rows, C);
    cp_free_all(buf, 7);
    cp_free_all(gwire, 3);
    return st;
}

/* ---------------------------------------------------------------------------
 * all_gather
 * ------------------------------------------------------------------------- */

/* Every rank's keys and values into `all` (wire elements), through `mine`
 * (f32, room for this rank's) and, in bf16 runs, `wire` (this rank's on
 * the wire). */
static ts_status cp_gather_kv(ts_plugin_attention_args *a, float *mine, void *wire, void *all) {
    size_t rows = (size_t)a->B * a->T_local, kvn = rows * 2 * a->C;
    TS_TRY(cp_pack_kv(mine, a->qkv, rows, a->C));
    if (cp_wire_bf16(a)) TS_TRY(cp_to_wire(wire, mine, kvn));
    double t0 = cp_now_ms();
    ts_status st = cp.host->comms->all_gather(a->comm, cp_wire_bf16(a) ? wire : mine, all, kvn,
                                              cp_wire_dtype(a));
    cp.wait_ms += cp_now_ms() - t0;
    return st;
}

/* Block `src` of the gathered keys and values in f32: in place in f32 runs,
 * converted into `hand` in bf16 runs. */
static ts_status cp_gathered_block(ts_plugin_attention_args *a, void *all, size_t kvn, int src,
                                   float *hand, float **kv) {
    if (!cp_wire_bf16(a)) {
        *kv = (float *)all + src * kvn;
        return TS_OK;
    }
    *kv = hand;
    return cp_from_wire(hand, (uint16_t *)all + src * kvn, kvn);
}

static ts_status cp_gather_forward(ts_plugin_attention_args *a, cp_saved *s,
                                   const cp_chunks *mine) {
    int n = cp.host->comms->size(a->comm);
    int B = a->B, Tl = a->T_local, C = a->C, NH = a->NH, have[2] = {0, 0};
    size_t kvn = (size_t)B * Tl * 2 * C;
    int bf = cp_wire_bf16(a);
    /* mine (f32; the block in hand in bf16 runs), every rank's, scratch,
     * mine on the wire */
    float *buf[4] = {cp_alloc(TS_MEM_COMM, kvn), cp_alloc_wire(a, TS_MEM_COMM, kvn * n),
                     cp_alloc(TS_MEM_ACTS, (size_t)mine->L * (C + NH)),
                     bf ? cp_alloc_wire(a, TS_MEM_COMM, kvn) : NULL};
    ts_status st = buf[0] && buf[1] && buf[2] && (!bf || buf[3]) ? TS_OK : TS_ERR_NOMEM;
    if (!st) st = cp_gather_kv(a, buf[0], buf[3], buf[1]);
    cp_rows qr = {mine, Tl, 3 * C};
    for (int src = 0; !st && src < n; src++) {
        cp_chunks theirs = cp_chunks_of(src, n, a->T);
        cp_rows kr = {&theirs, Tl, 2 * C};
        float *kv;
        st = cp_gathered_block(a, buf[1], kvn, src, buf[0], &kv);
        if (!st)
            st = cp_attend(a->qkv, qr, kv, kv + C, kr, a->out, s->lse, have, buf[2], B, C, NH);
    }
    cp_free_all(buf, 4);
    return st;
}

static ts_status cp_gather_backward(ts_plugin_attention_args *a, cp_saved *s,
                                    const cp_chunks *mine) {
    int n = cp.host->comms->size(a->comm);
    int B = a->B, Tl = a->T_local, C = a->C, NH = a->NH;
    size_t rows = (size_t)B * Tl, kvn = rows * 2 * C;
    int bf = cp_wire_bf16(a);
    /* mine (f32; the block in hand in bf16 runs), every rank's, their
     * gradients (f32), scratch, mine on the wire */
    float *buf[5] = {cp_alloc(TS_MEM_COMM, kvn), cp_alloc_wire(a, TS_MEM_COMM, kvn * n),
                     cp_alloc(TS_MEM_COMM, kvn * n), cp_alloc(TS_MEM_COMM, rows * 3 * C),
                     bf ? cp_alloc_wire(a, TS_MEM_COMM, kvn) : NULL};
    ts_status st = buf[0] && buf[1] && buf[2] && buf[3] && (!bf || buf[4]) ? TS_OK : TS_ERR_NOMEM;
    if (!st) st = cp_gather_kv(a, buf[0], buf[4], buf[1]);
    if (!st) st = cp.host->dev->zero(cp.ctx, buf[2], kvn * n * sizeof(float));
    cp_rows qr = {mine, Tl, 3 * C};
    for (int src = 0; !st && src < n; src++) {
        cp_chunks theirs = cp_chunks_of(src, n, a->T);
        cp_rows kr = {&theirs, Tl, 2 * C};
        float *kv, *dkv = buf[2] + src * kvn;
        st = cp_gathered_block(a, buf[1], kvn, src, buf[0], &kv);
        if (!st)
            st = cp_attend_backward(a->qkv, a->dqkv, qr, kv, kv + C, dkv, dkv + C, kr, a->out,
                                    a->dout, s->lse, B, C, NH);
    }
    /* Every rank's contributions to our keys, summed. */
    if (!st && cp_grads_bf16(a)) { /* the sums in bf16, through a wire of their own */
        float *wire = cp_alloc(TS_MEM_COMM, (kvn * (n + 1) + 1) / 2);
        uint16_t *all = (uint16_t *)wire, *ours = all + kvn * n;
        st = wire ? cp_to_wire(all, buf[2], kvn * n) : TS_ERR_NOMEM;
        double t0 = cp_now_ms();
        if (!st)
            st = cp.host->comms->reduce_scatter(a->comm, all, ours, kvn, TS_BF16, TS_REDUCE_SUM);
        cp.wait_ms += cp_now_ms() - t0;
        if (!st) st = cp_from_wire(buf[0], ours, kvn);
        cp_free_all(&wire, 1);
    } else if (!st) {
        double t0 = cp_now_ms();
        st = cp.host->comms->reduce_scatter(a->comm, buf[2], buf[0], kvn, TS_F32, TS_REDUCE_SUM);
        cp.wait_ms += cp_now_ms() - t0;
    }
    if (!st) st = cp_add_dkv(a->dqkv, buf[0], buf[3], rows, C);
    cp_free_all(buf, 5);
    return st;
}

/* ---------------------------------------------------------------------------
 * all_to_all (Ulysses)
 * ------------------------------------------------------------------------- */

/* Sequence-cut rows of F columns per head group -> blocks for the
 * all-to-all: `x` holds (B, Tl, parts x F) (parts column groups of F, e.g.
 * q, k, v); block j of `blocks` gets head group j of every part:
 * (B, Tl, parts x F/n). to_blocks = 0 is the inverse. */
static ts_status cp_heads_pack(float *blocks, float *x, int n, size_t rows, int parts, int F,
                               int to_blocks) {
    int Fj = F / n;
    size_t block = rows * (size_t)parts * Fj;
    for (int j = 0; j < n; j++)
        for (int p = 0; p < parts; p++) {
            float *b = blocks + j * block + (size_t)p * Fj;
            float *s = x + (size_t)p * F + (size_t)j * Fj;
            size_t bp = (size_t)parts * Fj * sizeof(float), sp = (size_t)parts * F * sizeof(float);
            TS_TRY(to_blocks
                       ? cp.host->dev->copy_2d(cp.ctx, b, bp, s, sp, Fj * sizeof(float), rows)
                       : cp.host->dev->copy_2d(cp.ctx, s, sp, b, bp, Fj * sizeof(float), rows));
        }
    return TS_OK;
}

/* The all-to-all's blocks (n source ranks, B, Tl, F) <-> whole sequences in
 * position order (B, T, F): chunk c of rank i's rows is at position
 * chunks_of(i).pos[c]. to_whole = 0 is the inverse. */
static ts_status cp_reorder(float *whole, float *blocks, int n, int B, int T, int Tl, int F,
                            int to_whole) {
    for (int i = 0; i < n; i++) {
        cp_chunks ch = cp_chunks_of(i, n, T);
        for (int b = 0; b < B; b++)
            for (int c = 0; c < ch.n; c++) {
                float *w = whole + ((size_t)b * T + ch.pos[c]) * F;
                float *k = blocks + (((size_t)i * B + b) * Tl + (size_t)c * ch.L) * F;
                size_t bytes = (size_t)ch.L * F * sizeof(float);
                TS_TRY(to_whole ? cp.host->dev->copy(cp.ctx, w, k, bytes)
                                : cp.host->dev->copy(cp.ctx, k, w, bytes));
            }
    }
    return TS_OK;
}

static ts_status cp_a2a(ts_comm *comm, const void *send, void *recv, size_t count, ts_dtype dt) {
    double t0 = cp_now_ms();
    ts_status st = cp.host->comms->all_to_all(comm, send, recv, count, dt);
    cp.wait_ms += cp_now_ms() - t0;
    return st;
}

/* The all-to-all of n blocks of `count` f32 values; with `bf` they travel
 * in two bytes, `send` then holding the received wire (its values are not
 * kept): for values the model rounds to bf16 (q, k, v and the attention's
 * output, exact) and for gradients when the run sends them in bf16. */
static ts_status cp_a2a_values(const ts_plugin_attention_args *a, int bf, float *send,
                               float *recv, size_t count) {
    if (!bf) return cp_a2a(a->comm, send, recv, count, TS_F32);
    size_t all = count * (size_t)cp.host->comms->size(a->comm);
    TS_TRY(cp_to_wire(recv, send, all));
    TS_TRY(cp_a2a(a->comm, recv, send, count, TS_BF16));
    return cp_from_wire(recv, send, all);
}

static ts_status cp_a2a_check(const ts_plugin_attention_args *a, int n) {
    if (a->NH % n != 0)
        return cp.host->error(cp.ctx, TS_ERR_CONFIG,
                              "[cp] algorithm = all_to_all cuts the heads over cp: the %d heads "
                              "of this rank ([model] heads / tp) do not divide by [cp] size = %d",
                              a->NH, n);
    return TS_OK;
}

static ts_status cp_a2a_forward(ts_plugin_attention_args *a, cp_saved *s) {
    int n = cp.host->comms->size(a->comm);
    TS_TRY(cp_a2a_check(a, n));
    int B = a->B, T = a->T, Tl = a->T_local, C = a->C, NH = a->NH, Ch = C / n, NHh = NH / n;
    size_t rows = (size_t)B * Tl, whole = (size_t)B * T;
    s->qkv = cp_alloc(TS_MEM_ACTS, whole * 3 * Ch);
    s->out = cp_alloc(TS_MEM_ACTS, whole * Ch);
    float *buf[2] = {cp_alloc(TS_MEM_COMM, rows * 3 * C), cp_alloc(TS_MEM_COMM, rows * 3 * C)};
    ts_status st = s->qkv && s->out && buf[0] && buf[1] ? TS_OK : TS_ERR_NOMEM;
    if (!st) st = cp_heads_pack(buf[0], (float *)a->qkv, n, rows, 3, C, 1);
    if (!st) st = cp_a2a_values(a, cp_wire_bf16(a), buf[0], buf[1], rows * 3 * Ch);
    if (!st) st = cp_reorder(s->qkv, buf[1], n, B, T, Tl, 3 * Ch, 1);
    if (!st) {
        cp.blocks++;
        cp.scores += cp_visible(T, T, 0) * NHh * B;
        st = cp.host->kernels->attention_block_forward(cp.ctx, s->out, s->lse, s->qkv, s->qkv + Ch,
                                                       s->qkv + 2 * Ch, B, T, T, Ch, NHh, 3 * Ch,
                                                       3 * Ch, Ch, 0);
    }
    /* Back to this rank's rows, every head. */
    if (!st) st = cp_reorder(s->out, buf[0], n, B, T, Tl, Ch, 0);
    if (!st) st = cp_a2a_values(a, cp_wire_bf16(a), buf[0], buf[1], rows * Ch);
    if (!st) st = cp_heads_pack(buf[1], a->out, n, rows, 1, C, 0);
    cp_free_all(buf, 2);
    return st;
}

static ts_status cp_a2a_backward(ts_plugin_attention_args *a, cp_saved *s) {
    int n = cp.host->comms->size(a->comm);
    int B = a->B, T = a->T, Tl = a->T_local, C = a->C, NH = a->NH, Ch = C / n, NHh = NH / n;
    size_t rows = (size_t)B * Tl, whole = (size_t)B * T;
    float *buf[4] = {cp_alloc(TS_MEM_COMM, rows * 3 * C), cp_alloc(TS_MEM_COMM, rows * 3 * C),
                     cp_alloc(TS_MEM_ACTS, whole * Ch), cp_alloc(TS_MEM_ACTS, whole * 3 * Ch)};
    float *dout = buf[2], *dqkv = buf[3];
    ts_status st = buf[0] && buf[1] && buf[2] && buf[3] ? TS_OK : TS_ERR_NOMEM;
    if (!st) st = cp_heads_pack(buf[0], (float *)a->dout, n, rows, 1, C, 1);
    if (!st) st = cp_a2a_values(a, cp_grads_bf16(a), buf[0], buf[1], rows * Ch);
    if (!st) st = cp_reorder(dout, buf[1], n, B, T, Tl, Ch, 1);
    if (!st) st = cp.host->dev->zero(cp.ctx, dqkv, whole * 3 * Ch * sizeof(float));
    if (!st)
        st = cp.host->kernels->attention_block_backward(
            cp.ctx, dqkv, dqkv + Ch, dqkv + 2 * Ch, s->qkv, s->qkv + Ch, s->qkv + 2 * Ch, s->out,
            dout, s->lse, B, T, T, Ch, NHh, 3 * Ch, 3 * Ch, Ch, 0);
    if (!st) st = cp_reorder(dqkv, buf[0], n, B, T, Tl, 3 * Ch, 0);
    if (!st) st = cp_a2a_values(a, cp_grads_bf16(a), buf[0], buf[1], rows * 3 * Ch);
    /* Unpacked into rows of 3C (every head), then added: dqkv accumulates. */
    if (!st) st = cp_heads_pack(buf[1], buf[0], n, rows, 3, C, 0);
    if (!st) st = cp.host->dev->add(cp.ctx, a->dqkv, buf[0], rows * 3 * C);
    cp_free_all(buf, 4);
    return st;
}

/* ---------------------------------------------------------------------------
 * The provider
 * ------------------------------------------------------------------------- */

static ts_status cp_forward(ts_plugin_ctx *ctx, ts_plugin_attention_args *a, void *user) {
    (void)ctx;
    (void)user;
    int n = cp.host->comms->size(a->comm), r = cp.host->comms->rank(a->comm);
    cp_chunks mine = cp_chunks_of(r, n, a->T);
    /* The core must have given us the rows we hold. */
    for (int c = 0; c < mine.n; c++)
        for (int i = 0; i < mine.L; i++)
            if (a->positions[c * mine.L + i] != mine.pos[c] + i)
                return cp.host->error(
                    cp.ctx, TS_ERR_INTERNAL, "row %d of cp rank %d is at position %d, expected %d",
                    c * mine.L + i, r, a->positions[c * mine.L + i], mine.pos[c] + i);
    cp_saved *s = cp.host->mem_alloc(TS_MEM_OTHER, sizeof *s);
    if (!s) return TS_ERR_NOMEM;
    memset(s, 0, sizeof *s);
    *a->saved = s;
    s->lse = cp_alloc(TS_MEM_ACTS, (size_t)a->B * a->NH * a->T_local);
    if (!s->lse) return TS_ERR_NOMEM;
    switch (cp.algo) {
    case CP_RING: return cp_ring_forward(a, s, &mine);
    case CP_ALL_GATHER: return cp_gather_forward(a, s, &mine);
    default: return cp_a2a_forward(a, s);
    }
}

/* Frees what a forward kept (after the backward, or when activation
 * recomputation drops it: the next forward exchanges again). */
static void cp_release(ts_plugin_ctx *ctx, ts_plugin_attention_args *a, void *user) {
    (void)ctx;
    (void)user;
    cp_saved *s = *a->saved;
    if (!s) return;
    float *keep[3] = {s->lse, s->qkv, s->out};
    cp_free_all(keep, 3);
    cp.host->mem_free(s);
    *a->saved = NULL;
}

static ts_status cp_backward(ts_plugin_ctx *ctx, ts_plugin_attention_args *a, void *user) {
    (void)ctx;
    (void)user;
    cp_saved *s = *a->saved;
    int n = cp.host->comms->size(a->comm), r = cp.host->comms->rank(a->comm);
    cp_chunks mine = cp_chunks_of(r, n, a->T);
    ts_status st = cp.algo == CP_RING         ? cp_ring_backward(a, s, &mine)
                   : cp.algo == CP_ALL_GATHER ? cp_gather_backward(a, s, &mine)
                                              : cp_a2a_backward(a, s);
    cp_release(ctx, a, user);
    return st;
}

/* The batch and every activation cut along the sequence over cp. */
static ts_status cp_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind == TS_PLAN_PARAM) continue;
        for (int a = 0; a < e->layout.naxes && e->layout.ndim >= 2; a++)
            if (strcmp(e->layout.axes[a].name, "cp") == 0)
                e->layout.axes[a].placement = ts_placement_shard(1);
    }
    return TS_OK;
}

/* The step's work and waiting, the same on every rank: each rank's score
 * count gathered over cp, and their spread. */
static ts_status cp_after_step(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)ev;
    (void)user;
    ts_comm *host = cp.host->comms->get(ctx, "host:cp");
    int n = host ? cp.host->comms->size(host) : 1;
    int32_t mine[2] = {(int32_t)(cp.scores >> 31), (int32_t)(cp.scores & 0x7fffffff)};
    int32_t *all = malloc((size_t)n * 2 * sizeof *all);
    if (!all) return TS_ERR_NOMEM;
    ts_status st = host ? cp.host->comms->all_gather(host, mine, all, 2, TS_I32) : TS_OK;
    if (!host) memcpy(all, mine, sizeof mine);
    int64_t lo = INT64_MAX, hi = 0;
    double sum = 0;
    for (int i = 0; !st && i < n; i++) {
        int64_t v = ((int64_t)all[2 * i] << 31) | all[2 * i + 1];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += (double)v;
    }
    free(all);
    if (st) return st;
    TS_TRY(cp.host->metric(ctx, "scores", (double)cp.scores));
    TS_TRY(cp.host->metric(ctx, "scores_min", (double)lo));
    TS_TRY(cp.host->metric(ctx, "scores_max", (double)hi));
    TS_TRY(cp.host->metric(ctx, "imbalance", sum > 0 ? hi / (sum / n) : 1.0));
    TS_TRY(cp.host->metric(ctx, "blocks", (double)cp.blocks));
    TS_TRY(cp.host->metric(ctx, "blocks_skipped", (double)cp.skipped));
    TS_TRY(cp.host->metric(ctx, "wait_ms", cp.wait_ms));
    cp.scores = cp.blocks = cp.skipped = 0;
    cp.wait_ms = 0;
    return TS_OK;
}

static ts_status cp_init(const ts_host *host, ts_plugin_ctx *ctx) {
    memset(&cp, 0, sizeof cp);
    cp.host = host;
    cp.ctx = ctx;
    if (!TS_DEVICE_HAS(host->dev, copy_2d))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core with the block attention kernels");
    int64_t size;
    const char *algo;
    TS_TRY(host->config->get_int(ctx, "size", &size));
    TS_TRY(host->config->get_str(ctx, "algorithm", &algo));
    TS_TRY(host->config->get_bool(ctx, "load_balance", &cp.balance));
    TS_TRY(host->config->get_bool(ctx, "overlap", &cp.overlap));
    cp.size = (int)size;
    cp.algo = strcmp(algo, "ring") == 0         ? CP_RING
              : strcmp(algo, "all_gather") == 0 ? CP_ALL_GATHER
                                                : CP_ALL_TO_ALL;
    TS_TRY(host->reg->axis(ctx, "cp", cp.size, TS_MESH_DENSE));
    TS_TRY(host->reg->transform(ctx, "sequence_cut", TS_PHASE_SHARD_SEQUENCE, cp_transform, NULL));
    TS_TRY(host->reg->hook(ctx, TS_HOOK_AFTER_OPTIMIZER, cp_after_step, NULL));
    /* Copied by the core: a local will do. */
    int order = cp.balance ? TS_SEQUENCE_MIRRORED : TS_SEQUENCE_CONTIGUOUS;
    ts_plugin_attention_ops ops = {.struct_size = sizeof ops,
                                   .forward = cp_forward,
                                   .backward = cp_backward,
                                   .release = cp_release,
                                   .order = order};
    return host->reg->attention(ctx, "cp", &ops, NULL);
}

static const ts_plugin_descriptor cp_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "cp",
    "0.1.0",
    "context parallelism: every sequence cut over cp; ring, all-gather or all-to-all attention",
    cp_keys,
    sizeof cp_keys / sizeof cp_keys[0],
    cp_init,
    NULL,
    TS_PLUGIN_THREAD_LOCAL_STATE, /* its state is _Thread_local */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &cp_descriptor;
}
