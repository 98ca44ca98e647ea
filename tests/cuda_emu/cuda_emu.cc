/*
 * cuda_emu.cc — the emulator's runtime (include/cuda_emu.h): the block
 * scheduler over coroutines, launch checks, shared memory, the CUDA runtime
 * calls over host memory, and cuBLAS's two GEMMs.
 */
#include "cuda_emu.h"

#include <stdlib.h>
#include <ucontext.h>

#include <algorithm>
#include <map>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "cuda_runtime_api.h"
#include "emu_async.h"

dim3 threadIdx, blockIdx, blockDim, gridDim;
double emu_lane_slot[2][1024];
unsigned char emu_lane_bank[1024];

/* ---------------------------------------------------------------------------
 * Errors and launch limits
 * ------------------------------------------------------------------------- */
static cudaError_t emu_error = cudaSuccess; /* what cudaGetLastError reports next */
static const char *emu_error_what = "";

void emu_fail(const char *what) {
    fprintf(stderr, "FAIL (emulated block %u,%u,%u thread %u,%u,%u): %s\n", blockIdx.x, blockIdx.y,
            blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z, what);
    exit(1);
}

static void emu_set_error(cudaError_t err, const char *what) {
    fprintf(stderr, "emulated launch refused: %s\n", what);
    if (emu_error == cudaSuccess) {
        emu_error = err;
        emu_error_what = what;
    }
}

#define EMU_SMEM_DEFAULT (48 * 1024)
#define EMU_SMEM_MAX (163 * 1024)
static struct {
    const void *func;
    int max_dynamic;
} emu_attrs[64];
static int emu_nattrs;

cudaError_t emu_func_set_attribute(const void *func, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > EMU_SMEM_MAX)
        return cudaErrorInvalidValue;
    for (int i = 0; i < emu_nattrs; i++)
        if (emu_attrs[i].func == func) {
            emu_attrs[i].max_dynamic = value;
            return cudaSuccess;
        }
    if (emu_nattrs == 64) return cudaErrorInvalidValue;
    emu_attrs[emu_nattrs].func = func;
    emu_attrs[emu_nattrs++].max_dynamic = value;
    return cudaSuccess;
}

static size_t emu_smem_limit(const void *func) {
    for (int i = 0; i < emu_nattrs; i++)
        if (emu_attrs[i].func == func && emu_attrs[i].max_dynamic > EMU_SMEM_DEFAULT)
            return (size_t)emu_attrs[i].max_dynamic;
    return EMU_SMEM_DEFAULT;
}

/* ---------------------------------------------------------------------------
 * Shared memory and deferred WMMA stores
 * ------------------------------------------------------------------------- */
alignas(256) static unsigned char emu_smem[EMU_SMEM_MAX];

void *emu_dynamic_smem(void) {
    return emu_smem;
}

#define EMU_MAX_THREADS 1024
#define EMU_WARPS (EMU_MAX_THREADS / 32)
struct emu_store {
    float *p;
    unsigned ldm;
    int col_major;
    float x[16][16];
};
/* One pending store per warp at most: a store begins with a warp barrier,
 * which lands the previous one. */
static emu_store emu_pending[EMU_WARPS];
static int emu_has_pending[EMU_WARPS];

void emu_store_later(float *p, unsigned ldm, int col_major, const float (*x)[16]) {
    int w = (int)(emu_tid() / 32);
    if (emu_has_pending[w]) emu_fail("a WMMA store while the warp's last one is pending");
    emu_store *st = &emu_pending[w];
    st->p = p;
    st->ldm = ldm;
    st->col_major = col_major;
    memcpy(st->x, x, sizeof st->x);
    emu_has_pending[w] = 1;
}

static void emu_land_store(int w) {
    if (!emu_has_pending[w]) return;
    emu_store *st = &emu_pending[w];
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            (st->col_major ? st->p[(size_t)c * st->ldm + r] : st->p[(size_t)r * st->ldm + c]) =
                st->x[r][c];
    emu_has_pending[w] = 0;
}

/* ---------------------------------------------------------------------------
 * The block scheduler
 *
 * Threads are coroutines. On x86-64 a switch saves the callee-saved
 * registers on the old stack and loads the new stack pointer (emu_switch,
 * below): ucontext's swapcontext makes a signal-mask system call on every
 * switch, which made emulated training steps take minutes. Elsewhere, and
 * under AddressSanitizer (which must see the stack switches), ucontext.
 * ------------------------------------------------------------------------- */
#define EMU_STACK (256 * 1024)
enum { EMU_RUNNABLE, EMU_AT_WARP, EMU_AT_BLOCK, EMU_DONE };
static char *emu_stacks;
static unsigned emu_cur;
static int emu_state[EMU_MAX_THREADS];
static void (*emu_fn)(void *);
static void *emu_arg;

#if defined(__SANITIZE_ADDRESS__)
#define EMU_UCONTEXT 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_UCONTEXT 1
#endif
#endif
#if !defined(__x86_64__)
#define EMU_UCONTEXT 1
#endif

#ifdef EMU_UCONTEXT
static ucontext_t emu_sched, emu_thr[EMU_MAX_THREADS];
static void emu_thread_done(void);
static void emu_entry(void) {
    emu_fn(emu_arg);
    emu_thread_done();
}
static void emu_thread_init(unsigned t) {
    getcontext(&emu_thr[t]);
    emu_thr[t].uc_stack.ss_sp = emu_stacks + (size_t)t * EMU_STACK;
    emu_thr[t].uc_stack.ss_size = EMU_STACK;
    emu_thr[t].uc_link = &emu_sched;
    makecontext(&emu_thr[t], emu_entry, 0);
}
static void emu_to_thread(unsigned t) {
    swapcontext(&emu_sched, &emu_thr[t]);
}
static void emu_to_scheduler(void) {
    swapcontext(&emu_thr[emu_cur], &emu_sched);
}
#else
/* emu_switch(save, next): pushes rbp, rbx, r12-r15, stores rsp in *save,
 * switches to `next` and pops the same registers from there. */
extern "C" void emu_switch(void **save, void *next);
__asm__(".text\n"
        ".globl emu_switch\n"
        ".type emu_switch, @function\n"
        "emu_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size emu_switch, .-emu_switch\n");
static void *emu_sched_sp, *emu_thr_sp[EMU_MAX_THREADS];

static void emu_thread_done(void);
static void emu_trampoline(void) {
    emu_fn(emu_arg);
    emu_thread_done();
    emu_switch(&emu_thr_sp[emu_cur], emu_sched_sp); /* never resumed */
    emu_fail("a finished thread was resumed");
}
/* A fresh stack whose first switch "returns" into emu_trampoline with the
 * alignment a function entry expects (rsp = 8 mod 16). */
static void emu_thread_init(unsigned t) {
    uintptr_t top = ((uintptr_t)(emu_stacks + (size_t)(t + 1) * EMU_STACK)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;                   /* the trampoline's return address */
    *--sp = (void *)emu_trampoline; /* where emu_switch's ret goes */
    for (int r = 0; r < 6; r++)
        *--sp = NULL; /* rbp rbx r12-r15 */
    emu_thr_sp[t] = sp;
}
static void emu_to_thread(unsigned t) {
    emu_switch(&emu_sched_sp, emu_thr_sp[t]);
}
static void emu_to_scheduler(void) {
    emu_switch(&emu_thr_sp[emu_cur], emu_sched_sp);
}
#endif

/* Per warp: lanes waiting at a warp barrier and lanes returned; the block:
 * threads waiting at a block barrier and threads not returned. */
static unsigned emu_warp_wait[EMU_WARPS], emu_warp_done[EMU_WARPS];
static unsigned emu_block_wait, emu_live;

static void emu_wait(int kind) {
    emu_state[emu_cur] = kind;
    if (kind == EMU_AT_WARP)
        emu_warp_wait[emu_cur / 32]++;
    else
        emu_block_wait++;
    emu_to_scheduler();
}
void emu_block_barrier(void) {
    emu_wait(EMU_AT_BLOCK);
}
void emu_warp_barrier(void) {
    emu_wait(EMU_AT_WARP);
}
static void emu_thread_done(void) {
    emu_state[emu_cur] = EMU_DONE;
    emu_warp_done[emu_cur / 32]++;
    emu_live--;
}

static void emu_set_thread(unsigned t) {
    emu_cur = t;
    threadIdx = dim3(t % blockDim.x, t / blockDim.x % blockDim.y, t / (blockDim.x * blockDim.y));
}

/* Runs the threads of the queue in order, each to its next barrier or its
 * end, then queues (in thread order) whatever can be released. */
static unsigned emu_queue[EMU_MAX_THREADS];

static void emu_run_block(unsigned n) {
    unsigned warps = (n + 31) / 32, nq = n;
    for (unsigned t = 0; t < n; t++) {
        emu_thread_init(t);
        emu_state[t] = EMU_RUNNABLE;
        emu_queue[t] = t;
        emu_lane_bank[t] = 0;
    }
    memset(emu_warp_wait, 0, sizeof emu_warp_wait);
    memset(emu_warp_done, 0, sizeof emu_warp_done);
    emu_block_wait = 0;
    emu_live = n;
    while (emu_live > 0) {
        for (unsigned q = 0; q < nq; q++) {
            emu_set_thread(emu_queue[q]);
            emu_to_thread(emu_queue[q]);
        }
        nq = 0;
        for (unsigned w = 0; w < warps; w++) {
            unsigned lo = w * 32, lanes = (lo + 32 < n ? 32 : n - lo);
            if (!emu_warp_wait[w] || emu_warp_wait[w] + emu_warp_done[w] != lanes) continue;
            if (emu_warp_done[w])
                emu_fail("a warp barrier (shuffle, __syncwarp) with returned lanes");
            emu_land_store((int)w);
            for (unsigned t = lo; t < lo + lanes; t++) {
                emu_state[t] = EMU_RUNNABLE;
                emu_queue[nq++] = t;
            }
            emu_warp_wait[w] = 0;
        }
        if (nq == 0 && emu_live > 0) {
            if (emu_block_wait != emu_live) {
                emu_cur = 0;
                threadIdx = dim3(0, 0, 0);
                emu_fail("no barrier can be released: threads wait at barriers others never reach");
            }
            for (unsigned w = 0; w < warps; w++)
                emu_land_store((int)w);
            for (unsigned t = 0; t < n; t++)
                if (emu_state[t] == EMU_AT_BLOCK) {
                    emu_state[t] = EMU_RUNNABLE;
                    emu_queue[nq++] = t;
                }
            emu_block_wait = 0;
        }
    }
    for (unsigned w = 0; w < warps; w++)
        emu_land_store((int)w);
}

void emu_launch_run(dim3 grid, dim3 block, size_t smem, const void *kernel, void (*fn)(void *),
                    void *arg) {
    unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > EMU_MAX_THREADS || block.z > 64) {
        emu_set_error(cudaErrorInvalidConfiguration, "block size");
        return;
    }
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        emu_set_error(cudaErrorInvalidConfiguration, "grid size");
        return;
    }
    if (smem > emu_smem_limit(kernel)) {
        emu_set_error(cudaErrorInvalidValue,
                      "dynamic shared memory above the kernel's limit (cudaFuncSetAttribute)");
        return;
    }
    if (!emu_stacks) emu_stacks = (char *)malloc((size_t)EMU_MAX_THREADS * EMU_STACK);
    if (!emu_stacks) emu_fail("out of memory for the coroutine stacks");
    gridDim = grid;
    blockDim = block;
    emu_fn = fn;
    emu_arg = arg;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                blockIdx = dim3(bx, by, bz);
                memset(emu_smem, 0xff, smem); /* NaN in every f32 slot */
                emu_run_block(n);
            }
}

/* ---------------------------------------------------------------------------
 * The CUDA runtime over host memory
 * ------------------------------------------------------------------------- */
static int emu_device_count(void) {
    const char *env = getenv("TS_EMU_DEVICES");
    int n = env ? atoi(env) : 8;
    return n < 0 ? 0 : n;
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = emu_device_count();
    return cudaSuccess;
}
static int emu_device = 0;
cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= emu_device_count()) return cudaErrorInvalidValue;
    emu_device = device;
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    cudaError_t e = emu_error;
    emu_error = cudaSuccess;
    return e;
}
const char *cudaGetErrorName(cudaError_t err) {
    switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    default: return "cudaErrorUnknown";
    }
}
const char *cudaGetErrorString(cudaError_t err) {
    return err == cudaSuccess ? "no error" : emu_error_what[0] ? emu_error_what : "emulated error";
}

/* --- streams and events: pending emulated NCCL operations ------------------ */
struct CUstream_st {
    std::vector<emu_op *> pending;
};
struct CUevent_st {
    std::vector<emu_op *> ops;
};
static CUstream_st emu_default_stream;

bool emu_op_test(emu_op *op) {
    if (op->done) return true;
    int flag = 1;
    if (!op->reqs.empty())
        MPI_Testall((int)op->reqs.size(), op->reqs.data(), &flag, MPI_STATUSES_IGNORE);
    if (!flag) return false;
    op->done = true;
    if (op->finish) op->finish();
    op->finish = nullptr;
    return true;
}
void emu_op_wait(emu_op *op) {
    if (op->done) return;
    if (!op->reqs.empty()) MPI_Waitall((int)op->reqs.size(), op->reqs.data(), MPI_STATUSES_IGNORE);
    emu_op_test(op);
}
void emu_op_unref(emu_op *op) {
    if (--op->refs == 0) delete op;
}
/* Drops the stream's completed operations (in order: a stream completes in order). */
static void emu_stream_prune(CUstream_st *s) {
    size_t k = 0;
    while (k < s->pending.size() && emu_op_test(s->pending[k]))
        emu_op_unref(s->pending[k++]);
    s->pending.erase(s->pending.begin(), s->pending.begin() + (long)k);
}
static bool emu_overlap(const char *a, size_t na, const char *b, size_t nb) {
    return a && b && na && nb && a < b + nb && b < a + na;
}
void emu_stream_push(cudaStream_t stream, emu_op *op) {
    CUstream_st *s = stream ? stream : &emu_default_stream;
    emu_stream_prune(s);
    for (emu_op *p : s->pending)
        if (!p->done && (emu_overlap(op->in, op->in_bytes, p->out, p->out_bytes) ||
                         emu_overlap(op->out, op->out_bytes, p->out, p->out_bytes) ||
                         emu_overlap(op->out, op->out_bytes, p->in, p->in_bytes)))
            emu_fail("an NCCL operation touches the buffer of a pending one on its stream "
                     "(the emulator issues at once; a GPU stream would order them)");
    s->pending.push_back(op);
}
static void emu_stream_drain(CUstream_st *s) {
    for (emu_op *op : s->pending) {
        emu_op_wait(op);
        emu_op_unref(op);
    }
    s->pending.clear();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
    (void)flags;
    *stream = new CUstream_st;
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    return cudaStreamCreateWithFlags(stream, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream) return cudaErrorInvalidValue;
    for (emu_op *op : stream->pending)
        emu_op_unref(op); /* NCCL keeps what it still needs */
    delete stream;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    emu_stream_drain(stream ? stream : &emu_default_stream);
    return emu_error;
}
cudaError_t cudaDeviceSynchronize(void) {
    emu_stream_drain(&emu_default_stream);
    return emu_error;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags) {
    (void)flags;
    *event = new CUevent_st;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *event) {
    return cudaEventCreateWithFlags(event, 0);
}
static void emu_event_clear(cudaEvent_t e) {
    for (emu_op *op : e->ops)
        emu_op_unref(op);
    e->ops.clear();
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event) return cudaErrorInvalidValue;
    emu_event_clear(event);
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return cudaErrorInvalidValue;
    CUstream_st *s = stream ? stream : &emu_default_stream;
    emu_stream_prune(s);
    emu_event_clear(event);
    for (emu_op *op : s->pending) {
        op->refs++;
        event->ops.push_back(op);
    }
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (!event) return cudaErrorInvalidValue;
    for (emu_op *op : event->ops)
        if (!emu_op_test(op)) return cudaErrorNotReady;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    if (!event) return cudaErrorInvalidValue;
    for (emu_op *op : event->ops)
        emu_op_wait(op);
    return cudaSuccess;
}
/* Work issued after this on `stream` waits for the event: here, the host waits. */
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
    (void)stream, (void)flags;
    return cudaEventSynchronize(event);
}

/* --- memory: host blocks, remembered for cudaPointerGetAttributes --------- */
static std::map<uintptr_t, size_t> emu_blocks; /* start -> bytes */

/* The emulated device's memory: TS_EMU_DEVICE_MIB (default 16 GiB); a
 * request beyond what is left fails as cudaMalloc does. */
static size_t emu_in_use;
static size_t emu_capacity(void) {
    const char *env = getenv("TS_EMU_DEVICE_MIB");
    return (size_t)(env ? atoll(env) : 16384) << 20;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
    *ptr = NULL;
    if (bytes > emu_capacity() || emu_in_use > emu_capacity() - bytes)
        return cudaErrorMemoryAllocation;
    size_t padded = (bytes + 255) / 256 * 256 + 256;
    *ptr = aligned_alloc(256, padded);
    if (!*ptr) return cudaErrorMemoryAllocation;
    emu_blocks[(uintptr_t)*ptr] = padded;
    emu_in_use += padded;
    return cudaSuccess;
}
cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    auto it = emu_blocks.find((uintptr_t)ptr);
    if (it == emu_blocks.end()) return cudaErrorInvalidValue;
    emu_in_use -= it->second;
    emu_blocks.erase(it);
    free(ptr);
    return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr) {
    uintptr_t p = (uintptr_t)ptr;
    auto it = emu_blocks.upper_bound(p);
    int device = 0;
    if (it != emu_blocks.begin()) {
        --it;
        device = p < it->first + it->second;
    }
    attr->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    attr->device = device ? emu_device : -1;
    attr->devicePointer = device ? (void *)ptr : NULL;
    attr->hostPointer = device ? NULL : (void *)ptr;
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    (void)kind;
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
    (void)stream;
    return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
    (void)kind, (void)stream;
    if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
    for (size_t r = 0; r < height; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
    if (bytes) memset(ptr, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream) {
    (void)stream;
    return cudaMemset(ptr, value, bytes);
}

/* ---------------------------------------------------------------------------
 * cuBLAS
 * ------------------------------------------------------------------------- */
struct cublasContext {
    cublasMath_t math;
};
struct cublasLtContext {
    int unused;
};

cublasStatus_t cublasCreate(cublasHandle_t *handle) {
    *handle = (cublasHandle_t)calloc(1, sizeof(cublasContext));
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    (void)stream;
    return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    return mode == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}
const char *cublasGetStatusName(cublasStatus_t st) {
    return st == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_EMULATED_ERROR";
}
const char *cublasGetStatusString(cublasStatus_t st) {
    return st == CUBLAS_STATUS_SUCCESS ? "success" : "refused by the emulated cuBLAS";
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    *handle = (cublasLtHandle_t)calloc(1, sizeof(cublasLtContext));
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

/* element (i, j) of op(X), X column-major with leading dimension ld */
static float emu_elem(const void *X, cudaDataType type, cublasOperation_t op, int ld, int i,
                      int j) {
    size_t at = op == CUBLAS_OP_N ? (size_t)j * ld + i : (size_t)i * ld + j;
    return type == CUDA_R_16BF ? ts_bf16_to_f32(((const uint16_t *)X)[at]) : ((const float *)X)[at];
}

/* op(A) (m x k) and op(B) (k x n) are first copied into f32 rows of A and
 * columns of B, so that each C element is one contiguous dot product. */
static cublasStatus_t emu_gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                               int n, int k, float alpha, const void *A, cudaDataType at, int lda,
                               const void *B, cudaDataType bt, int ldb, float beta, float *C,
                               int ldc) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int arows = ta == CUBLAS_OP_N ? m : k, brows = tb == CUBLAS_OP_N ? k : n;
    if (m < 0 || n < 0 || k < 0 || ldc < (m > 1 ? m : 1) || lda < (arows > 1 ? arows : 1) ||
        ldb < (brows > 1 ? brows : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    float *ar = (float *)malloc(((size_t)m * k + (size_t)k * n + 1) * sizeof(float));
    if (!ar) return CUBLAS_STATUS_ALLOC_FAILED;
    float *bc = ar + (size_t)m * k;
    for (int i = 0; i < m; i++)
        for (int p = 0; p < k; p++)
            ar[(size_t)i * k + p] = emu_elem(A, at, ta, lda, i, p);
    for (int j = 0; j < n; j++)
        for (int p = 0; p < k; p++)
            bc[(size_t)j * k + p] = emu_elem(B, bt, tb, ldb, p, j);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const float *x = ar + (size_t)i * k, *y = bc + (size_t)j * k;
            float acc = 0.0f;
            for (int p = 0; p < k; p++)
                acc += x[p] * y[p];
            float *c = C + (size_t)j * ldc + i;
            *c = beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
        }
    free(ar);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float *alpha, const float *A, int lda,
                           const float *B, int ldb, const float *beta, float *C, int ldc) {
    /* f32 GEMMs must not use TF32: the kernels set CUBLAS_DEFAULT_MATH. */
    if (!handle || handle->math != CUBLAS_DEFAULT_MATH) return CUBLAS_STATUS_NOT_SUPPORTED;
    return emu_gemm(handle, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, *beta,
                    C, ldc);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const void *alpha, const void *A,
                            cudaDataType Atype, int lda, const void *B, cudaDataType Btype, int ldb,
                            const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (Ctype != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || Atype != Btype)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return emu_gemm(handle, ta, tb, m, n, k, *(const float *)alpha, A, Atype, lda, B, Btype, ldb,
                    *(const float *)beta, (float *)C, ldc);
}
