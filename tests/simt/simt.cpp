/*
 * simt.cpp — the SIMT layer's execution engine (see simt.h for the model).
 *
 * A grid is a job: its blocks are claimed one at a time by the launching thread
 * (the stream's worker) and by a small pool of helper threads. A block runs on
 * a runner: one ucontext fiber per CUDA thread, each on its own mmap'd stack
 * with a guard page below it. The runner's scheduler makes passes over the
 * fibers (in thread order, or reverse order in odd blocks), switching to each
 * runnable one; a fiber runs until it finishes or waits at a barrier or warp
 * collective. The last thread to arrive completes the operation and wakes the
 * others. A pass that can run nothing while threads remain is a deadlock: it is
 * diagnosed (who waits where, who never came) and becomes the grid's error.
 * Divergence that can never resolve (a thread exits while others wait for it,
 * two barrier sites at once, lanes of one collective calling another) is
 * reported at the moment it happens.
 *
 * Sanitizers: fiber switches are announced to AddressSanitizer
 * (__sanitizer_{start,finish}_switch_fiber) and ThreadSanitizer
 * (__tsan_switch_to_fiber), and the stacks of fibers abandoned after an error
 * are unpoisoned before reuse.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <atomic>
#include "simt.h"

#if defined(__SANITIZE_ADDRESS__)
#define SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIMT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SIMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SIMT_TSAN 1
#endif
#endif
#ifdef SIMT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef SIMT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* Sanitizer-instrumented frames are several times larger. */
#if defined(SIMT_ASAN) || defined(SIMT_TSAN)
static const size_t fiber_stack_bytes = 128 * 1024;
#else
static const size_t fiber_stack_bytes = 64 * 1024;
#endif

__thread const simt_ids *simt_tls_ids;

extern "C" {
/* gen_simt_sources.py: the dynamic shared memory region every extern __shared__ name aliases. */
extern __thread unsigned char simt_dynamic_smem_storage[SIMT_MAX_DYNAMIC_SMEM];
/* simt_host.c: queue a grid on a cpu_stream. */
SIMT_API int simt_stream_enqueue(void *stream, void *closure);
SIMT_API int simt_run_queued(void *closure);
}

/* Context switches. ucontext's swapcontext saves and restores the signal mask
 * with a system call on every switch; on x86-64 a few lines of assembly switch
 * stacks instead (callee-saved registers, MXCSR and the x87 control word: what
 * the ABI says survives a call). Other machines use swapcontext. */
#if defined(__x86_64__) && !defined(SIMT_USE_UCONTEXT)
#define SIMT_ASM_SWITCH 1
extern "C" {
/* Save the caller's registers on its stack and its stack pointer in *save_sp; continue on new_sp. */
SIMT_HIDDEN void simt_ctx_switch(void **save_sp, void *new_sp);
/* First frame of a fiber: calls the function in rbx, never returns. */
SIMT_HIDDEN void simt_ctx_start(void);
}
__asm__(".text\n"
        ".globl simt_ctx_switch\n.hidden simt_ctx_switch\n.type simt_ctx_switch,@function\n"
        "simt_ctx_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size simt_ctx_switch, .-simt_ctx_switch\n"
        ".globl simt_ctx_start\n.hidden simt_ctx_start\n.type simt_ctx_start,@function\n"
        "simt_ctx_start:\n"
        "  andq $-16, %rsp\n  call *%rbx\n  ud2\n"
        ".size simt_ctx_start, .-simt_ctx_start\n");
#endif

namespace {

enum fiber_state { F_READY, F_BARRIER, F_WARP, F_DONE };

struct runner;

struct fiber {
    simt_ids ids; /* what threadIdx & co. read while this fiber runs */
#ifdef SIMT_ASM_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    char *stack;
    int linear, warp, lane;
    int state, started;
    const char *wait_what, *wait_file; /* where it waits (messages) */
    int wait_line;
    unsigned wait_mask;
    uint64_t result;                    /* of the barrier or collective it waited in */
    void *asan_fake_stack;
    void *tsan_fiber;
    runner *r;
};

/* Lanes of one warp that are inside one collective call. */
struct warp_group {
    unsigned mask, arrived;
    int kind;
    const char *what, *file;
    int line;
};

struct warp_state {
    unsigned exists, exited;
    int ngroups;
    warp_group groups[32];
    uint64_t value[32];
    int b[32], c[32];
};

struct runner {
    fiber *fibers;
    warp_state *warps;
    int capacity;
    char *stacks;
    size_t stacks_bytes;
#ifdef SIMT_ASM_SWITCH
    void *sched_sp;
#else
    ucontext_t sched;
#endif
    void *tsan_sched;
    const void *sched_stack_bottom;
    size_t sched_stack_size;
    void *sched_fake_stack;
    /* the block being run */
    simt::launch_base *launch;
    int n, done, failed;
    uint3 block_idx;
    int bar_arrived, bar_kind, bar_line, bar_count, bar_and, bar_or;
    const char *bar_what, *bar_file;
    char message[1024];
    runner *next_free;
};

__thread fiber *tls_fiber;
__thread int tls_last_error;
__thread char tls_last_message[1024];
#ifdef SIMT_ASAN
__thread size_t tls_dynamic_poisoned = (size_t)-1; /* dynamic size the region's poisoning is set for */
#endif

size_t page_bytes() { return (size_t)sysconf(_SC_PAGESIZE); }

/* ------------------------------------------------------------------ runners */

pthread_mutex_t runner_lock = PTHREAD_MUTEX_INITIALIZER;
runner *free_runners;

void runner_free_stacks(runner *r)
{
    if (r->stacks) munmap(r->stacks, r->stacks_bytes);
#ifdef SIMT_TSAN
    for (int i = 0; i < r->capacity; i++)
        if (r->fibers[i].tsan_fiber) __tsan_destroy_fiber(r->fibers[i].tsan_fiber);
#endif
    free(r->fibers);
    free(r->warps);
    r->stacks = NULL;
    r->fibers = NULL;
    r->warps = NULL;
    r->capacity = 0;
}

/* Room for n fibers: stacks with a PROT_NONE guard page below each. */
bool runner_reserve(runner *r, int n)
{
    if (r->capacity >= n) return true;
    runner_free_stacks(r);
    int cap = (n + 255) / 256 * 256;
    size_t guard = page_bytes(), slot = fiber_stack_bytes + guard;
    size_t bytes = slot * (size_t)cap;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return false;
    r->fibers = (fiber *)calloc((size_t)cap, sizeof(fiber));
    r->warps = (warp_state *)calloc((size_t)cap / 32, sizeof(warp_state));
    if (!r->fibers || !r->warps) {
        munmap(m, bytes);
        free(r->fibers);
        free(r->warps);
        r->fibers = NULL;
        r->warps = NULL;
        return false;
    }
    r->stacks = (char *)m;
    r->stacks_bytes = bytes;
    r->capacity = cap;
    for (int i = 0; i < cap; i++) {
        char *base = r->stacks + slot * (size_t)i;
        mprotect(base, guard, PROT_NONE);
        fiber *f = &r->fibers[i];
        f->stack = base + guard;
        f->r = r;
#ifndef SIMT_ASM_SWITCH
        getcontext(&f->ctx);
#endif
#ifdef SIMT_TSAN
        f->tsan_fiber = __tsan_create_fiber(0);
#endif
    }
    return true;
}

runner *runner_acquire(int n)
{
    pthread_mutex_lock(&runner_lock);
    runner **best = NULL;
    for (runner **p = &free_runners; *p; p = &(*p)->next_free)
        if (!best || ((*p)->capacity >= n && (*best)->capacity < n)) best = p;
    runner *r = NULL;
    if (best) {
        r = *best;
        *best = r->next_free;
    }
    pthread_mutex_unlock(&runner_lock);
    if (!r) r = (runner *)calloc(1, sizeof(runner));
    if (!r) return NULL;
    if (!runner_reserve(r, n)) {
        free(r);
        return NULL;
    }
    return r;
}

void runner_release(runner *r)
{
    pthread_mutex_lock(&runner_lock);
    r->next_free = free_runners;
    free_runners = r;
    pthread_mutex_unlock(&runner_lock);
}

/* --------------------------------------------------------- fiber switching */

void fiber_entry();

void switch_to_fiber(runner *r, fiber *f)
{
    tls_fiber = f;
    simt_tls_ids = &f->ids;
    if (!f->started) {
        f->started = 1;
#ifdef SIMT_ASAN
        /* A fresh fiber on a reused stack: forget the shadow of the frames that ran there before
         * (the frame a finished fiber left behind is never popped). */
        __asan_unpoison_memory_region(f->stack, fiber_stack_bytes);
#endif
#ifdef SIMT_ASM_SWITCH
        /* The frame simt_ctx_switch pops: MXCSR/x87 CW, r15..r12, rbx = entry, rbp, return to simt_ctx_start. */
        uintptr_t top = ((uintptr_t)(f->stack + fiber_stack_bytes) - 128) & ~(uintptr_t)15;
        uint64_t *frame = (uint64_t *)(top - 64);
        uint32_t control = 0x1F80u;          /* MXCSR default: all exceptions masked, round to nearest */
        uint16_t x87 = 0x037Fu;              /* x87 default control word */
        memset(frame, 0, 64);
        memcpy(frame, &control, 4);
        memcpy((char *)frame + 4, &x87, 2);
        frame[5] = (uint64_t)(uintptr_t)&fiber_entry; /* rbx */
        frame[7] = (uint64_t)(uintptr_t)&simt_ctx_start;
        f->sp = frame;
#else
        f->ctx.uc_stack.ss_sp = f->stack;
        f->ctx.uc_stack.ss_size = fiber_stack_bytes;
        f->ctx.uc_link = &r->sched;
        makecontext(&f->ctx, fiber_entry, 0);
#endif
    }
#ifdef SIMT_ASAN
    __sanitizer_start_switch_fiber(&r->sched_fake_stack, f->stack, fiber_stack_bytes);
#endif
#ifdef SIMT_TSAN
    __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
#ifdef SIMT_ASM_SWITCH
    simt_ctx_switch(&r->sched_sp, f->sp);
#else
    swapcontext(&r->sched, &f->ctx);
#endif
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(r->sched_fake_stack, NULL, NULL);
#endif
    tls_fiber = NULL;
    simt_tls_ids = NULL;
}

/* From a fiber back to its runner's scheduler; returns when the fiber is resumed. */
void yield_to_scheduler(fiber *f, bool final)
{
    runner *r = f->r;
#ifdef SIMT_ASAN
    __sanitizer_start_switch_fiber(final ? NULL : &f->asan_fake_stack, r->sched_stack_bottom, r->sched_stack_size);
#else
    (void)final;
#endif
#ifdef SIMT_TSAN
    __tsan_switch_to_fiber(r->tsan_sched, 0);
#endif
#ifdef SIMT_ASM_SWITCH
    simt_ctx_switch(&f->sp, r->sched_sp);
#else
    swapcontext(&f->ctx, &r->sched);
#endif
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake_stack, &r->sched_stack_bottom, &r->sched_stack_size);
#endif
}

/* ----------------------------------------------------------------- messages */

const char *base_name(const char *path)
{
    const char *s = path ? strrchr(path, '/') : NULL;
    return s ? s + 1 : path ? path : "?";
}

void lanes_str(unsigned mask, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < 32 && used + 8 < len;) {
        if (!(mask >> i & 1u)) { i++; continue; }
        int j = i;
        while (j + 1 < 32 && (mask >> (j + 1) & 1u)) j++;
        used += (size_t)snprintf(buf + used, len - used, "%s%d", used ? "," : "", i);
        if (j > i) used += (size_t)snprintf(buf + used, len - used, "-%d", j);
        i = j + 1;
    }
}

/* Record the block's first error: "<kernel> launched at f:l, block (x,y,z): <what>". */
void block_error(runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void block_error(runner *r, const char *fmt, ...)
{
    if (r->failed) return;
    r->failed = 1;
    simt::launch_base *L = r->launch;
    int used = snprintf(r->message, sizeof r->message, "kernel %s (launched at %s:%d), block (%u,%u,%u) of %u threads: ",
                        L->kernel_name, base_name(L->file), L->line, r->block_idx.x, r->block_idx.y, r->block_idx.z,
                        (unsigned)r->n);
    if (used < 0 || (size_t)used >= sizeof r->message) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message + used, sizeof r->message - (size_t)used, fmt, ap);
    va_end(ap);
}

void thread_str(const fiber *f, char *buf, size_t len)
{
    snprintf(buf, len, "thread (%u,%u,%u) [warp %d lane %d]", f->ids.thread_idx.x, f->ids.thread_idx.y,
             f->ids.thread_idx.z, f->warp, f->lane);
}

/* End the calling fiber's block with the error already recorded. */
[[noreturn]] void abandon(fiber *f)
{
    yield_to_scheduler(f, false);
    abort(); /* unreachable: an abandoned fiber is never resumed */
}

/* ------------------------------------------------------------ fiber bodies */

void fiber_exit_checks(runner *r, fiber *f)
{
    warp_state *w = &r->warps[f->warp];
    unsigned bit = 1u << f->lane;
    char who[96], lanes[128];
    for (int g = 0; g < w->ngroups; g++) {
        if (w->groups[g].mask & bit) {
            thread_str(f, who, sizeof who);
            lanes_str(w->groups[g].arrived, lanes, sizeof lanes);
            block_error(r, "%s exited while lanes %s wait for it in %s(mask 0x%08x) at %s:%d (divergent warp)", who,
                        lanes, w->groups[g].what, w->groups[g].mask, base_name(w->groups[g].file), w->groups[g].line);
            return;
        }
    }
    if (r->bar_arrived > 0) {
        thread_str(f, who, sizeof who);
        block_error(r, "%s exited while %d thread(s) wait at %s at %s:%d: a barrier some threads never reach", who,
                    r->bar_arrived, r->bar_what, base_name(r->bar_file), r->bar_line);
    }
}

void fiber_entry()
{
    fiber *f = tls_fiber;
    runner *r = f->r;
#ifdef SIMT_ASAN
    __sanitizer_finish_switch_fiber(NULL, &r->sched_stack_bottom, &r->sched_stack_size);
#endif
    r->launch->run_thread(r->launch);
    f->state = F_DONE;
    r->done++;
    r->warps[f->warp].exited |= 1u << f->lane;
    fiber_exit_checks(r, f);
    yield_to_scheduler(f, !r->failed);
    abort(); /* unreachable: a finished fiber is never resumed */
}

/* Why nothing can run: name the operation that waits and who never came. */
void diagnose_deadlock(runner *r)
{
    char who[96], lanes[128];
    if (r->bar_arrived > 0) {
        for (int i = 0; i < r->n; i++) {
            fiber *f = &r->fibers[i];
            if (f->state == F_WARP) {
                thread_str(f, who, sizeof who);
                block_error(r, "%s at %s:%d: %d of %d threads arrived; %s waits instead in %s(mask 0x%08x) at %s:%d "
                               "(a barrier some threads never reach)",
                            r->bar_what, base_name(r->bar_file), r->bar_line, r->bar_arrived, r->n, who, f->wait_what,
                            f->wait_mask, base_name(f->wait_file), f->wait_line);
                return;
            }
        }
    }
    for (int wi = 0; wi < (r->n + 31) / 32; wi++) {
        warp_state *w = &r->warps[wi];
        if (!w->ngroups) continue;
        warp_group *g = &w->groups[0];
        unsigned missing = g->mask & ~g->arrived;
        int lane = __builtin_ctz(missing);
        fiber *f = &r->fibers[wi * 32 + lane];
        lanes_str(missing, lanes, sizeof lanes);
        thread_str(f, who, sizeof who);
        block_error(r, "warp %d: %s(mask 0x%08x) at %s:%d waits for lanes %s, but %s waits in %s at %s:%d "
                       "(divergent warp)",
                    wi, g->what, g->mask, base_name(g->file), g->line, lanes, who,
                    f->state == F_DONE ? "(exited)" : f->wait_what, base_name(f->wait_file), f->wait_line);
        return;
    }
    block_error(r, "no thread can make progress (internal scheduler error)");
}

/* ------------------------------------------------------------ block runner */

void prepare_dynamic_smem(size_t bytes)
{
#ifdef SIMT_ASAN
    if (tls_dynamic_poisoned != bytes) {
        __asan_unpoison_memory_region(simt_dynamic_smem_storage, bytes);
        __asan_poison_memory_region(simt_dynamic_smem_storage + bytes, SIMT_MAX_DYNAMIC_SMEM - bytes);
        tls_dynamic_poisoned = bytes;
    }
#endif
    memset(simt_dynamic_smem_storage, 0xff, bytes); /* uninitialized reads see NaN / -1 */
}

void run_block(runner *r, simt::launch_base *L, uint64_t block_linear)
{
    const dim3 bd = L->block, gd = L->grid;
    const int n = (int)(bd.x * bd.y * bd.z);
    r->launch = L;
    r->n = n;
    r->done = 0;
    r->failed = 0;
    r->bar_arrived = 0;
    r->block_idx.x = (unsigned)(block_linear % gd.x);
    r->block_idx.y = (unsigned)(block_linear / gd.x % gd.y);
    r->block_idx.z = (unsigned)(block_linear / ((uint64_t)gd.x * gd.y));
    for (int i = 0; i < n; i++) {
        fiber *f = &r->fibers[i];
        f->ids.thread_idx.x = (unsigned)i % bd.x;
        f->ids.thread_idx.y = (unsigned)i / bd.x % bd.y;
        f->ids.thread_idx.z = (unsigned)i / (bd.x * bd.y);
        f->ids.block_idx = r->block_idx;
        f->ids.block_dim = bd;
        f->ids.grid_dim = gd;
        f->linear = i;
        f->warp = i / 32;
        f->lane = i % 32;
        f->state = F_READY;
        f->started = 0;
        f->result = 0;
        f->wait_what = f->wait_file = "";
        f->wait_line = 0;
        f->wait_mask = 0;
    }
    for (int w = 0; w < (n + 31) / 32; w++) {
        int lanes = n - w * 32 < 32 ? n - w * 32 : 32;
        r->warps[w].exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
        r->warps[w].exited = 0;
        r->warps[w].ngroups = 0;
    }
    prepare_dynamic_smem(L->dynamic_smem);
#ifdef SIMT_TSAN
    r->tsan_sched = __tsan_get_current_fiber();
#endif
    const bool reverse = block_linear & 1;
    for (;;) {
        int ran = 0;
        for (int k = 0; k < n && !r->failed; k++) {
            fiber *f = &r->fibers[reverse ? n - 1 - k : k];
            if (f->state != F_READY) continue;
            switch_to_fiber(r, f);
            ran++;
        }
        if (r->failed || r->done == n) break;
        if (!ran) {
            diagnose_deadlock(r);
            break;
        }
    }
#ifdef SIMT_ASAN
    if (r->failed) /* abandoned fibers leave poisoned frames behind */
        for (int i = 0; i < n; i++)
            if (r->fibers[i].started) __asan_unpoison_memory_region(r->fibers[i].stack, fiber_stack_bytes);
#endif
}

/* -------------------------------------------------------------- jobs, pool */

struct job {
    simt::launch_base *launch;
    uint64_t nblocks;
    std::atomic<uint64_t> next_block;
    std::atomic<int> failed;
    int helpers_in; /* under pool.mu */
    job *next;      /* queue link, under pool.mu */
    pthread_mutex_t message_lock;
    char message[1024];
};

struct pool_state {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    job *head;
    int started;
    int threads;
};
pool_state pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, 0};

void job_fail(job *j, const char *message)
{
    pthread_mutex_lock(&j->message_lock);
    if (!j->failed.load()) snprintf(j->message, sizeof j->message, "%s", message);
    j->failed.store(1);
    pthread_mutex_unlock(&j->message_lock);
}

void run_blocks(job *j)
{
    runner *r = NULL;
    const simt::launch_base *L = j->launch;
    const int n = (int)(L->block.x * L->block.y * L->block.z);
    while (!j->failed.load(std::memory_order_relaxed)) {
        uint64_t b = j->next_block.fetch_add(1);
        if (b >= j->nblocks) break;
        if (!r && !(r = runner_acquire(n))) {
            job_fail(j, "out of memory for the fiber stacks of one block");
            break;
        }
        run_block(r, j->launch, b);
        if (r->failed) job_fail(j, r->message);
    }
    if (r) runner_release(r);
}

void queue_remove(job *j)
{
    for (job **p = &pool.head; *p; p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            return;
        }
}

void *helper_main(void *)
{
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (!pool.head) pthread_cond_wait(&pool.work_cv, &pool.mu);
        job *j = pool.head;
        j->helpers_in++;
        pthread_mutex_unlock(&pool.mu);
        run_blocks(j);
        pthread_mutex_lock(&pool.mu);
        queue_remove(j); /* exhausted (or failed): nothing left to claim */
        j->helpers_in--;
        pthread_cond_broadcast(&pool.done_cv);
    }
    return NULL;
}

/* Start the helpers once (SIMT_THREADS - 1 of them). They live for the process. */
int pool_helpers()
{
    pthread_mutex_lock(&pool.mu);
    if (!pool.started) {
        pool.started = 1;
        int want = simt_threads() - 1;
        for (int i = 0; i < want; i++) {
            pthread_t t;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            if (pthread_create(&t, &attr, helper_main, NULL) == 0) pool.threads++;
            pthread_attr_destroy(&attr);
        }
    }
    int n = pool.threads;
    pthread_mutex_unlock(&pool.mu);
    return n;
}

/* Run a whole grid on this thread and the helpers. 0, or 1 with the message in msg. */
int execute(simt::launch_base *L, char *msg, size_t msg_len)
{
    job j;
    j.launch = L;
    j.nblocks = (uint64_t)L->grid.x * L->grid.y * L->grid.z;
    j.next_block.store(0);
    j.failed.store(0);
    j.helpers_in = 0;
    j.next = NULL;
    pthread_mutex_init(&j.message_lock, NULL);
    j.message[0] = '\0';
    bool queued = j.nblocks > 1 && pool_helpers() > 0;
    if (queued) {
        pthread_mutex_lock(&pool.mu);
        job **p = &pool.head;
        while (*p) p = &(*p)->next;
        *p = &j;
        pthread_cond_broadcast(&pool.work_cv);
        pthread_mutex_unlock(&pool.mu);
    }
    run_blocks(&j);
    if (queued) {
        pthread_mutex_lock(&pool.mu);
        queue_remove(&j);
        while (j.helpers_in > 0) pthread_cond_wait(&pool.done_cv, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
    pthread_mutex_destroy(&j.message_lock);
    if (!j.failed.load()) return 0;
    snprintf(msg, msg_len, "%s", j.message);
    return 1;
}

/* ----------------------------------------------- launch errors, stream errors */

int set_last_error(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int set_last_error(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_last_message, sizeof tls_last_message, fmt, ap);
    va_end(ap);
    tls_last_error = err;
    return err;
}

struct stream_error {
    void *stream;
    char message[1024];
    stream_error *next;
};
pthread_mutex_t stream_errors_lock = PTHREAD_MUTEX_INITIALIZER;
stream_error *stream_errors;
void (*error_hook)(const char *message);

void record_stream_error(void *stream, const char *message)
{
    pthread_mutex_lock(&stream_errors_lock);
    stream_error *e = stream_errors;
    while (e && e->stream != stream) e = e->next;
    if (!e && (e = (stream_error *)calloc(1, sizeof *e))) {
        e->stream = stream;
        snprintf(e->message, sizeof e->message, "%s", message);
        e->next = stream_errors;
        stream_errors = e;
    }
    pthread_mutex_unlock(&stream_errors_lock);
}

stream_error *unlink_stream_error(void *stream)
{
    for (stream_error **p = &stream_errors; *p; p = &(*p)->next)
        if ((*p)->stream == stream) {
            stream_error *e = *p;
            *p = e->next;
            return e;
        }
    return NULL;
}

/* Per-kernel dynamic shared memory limits set with cudaFuncSetAttribute. */
struct smem_limit {
    const void *kernel;
    int bytes;
    smem_limit *next;
};
pthread_mutex_t smem_limits_lock = PTHREAD_MUTEX_INITIALIZER;
smem_limit *smem_limits;

size_t dynamic_smem_limit(const void *kernel)
{
    size_t limit = SIMT_DEFAULT_DYNAMIC_SMEM;
    pthread_mutex_lock(&smem_limits_lock);
    for (smem_limit *s = smem_limits; s; s = s->next)
        if (s->kernel == kernel) {
            limit = (size_t)s->bytes;
            break;
        }
    pthread_mutex_unlock(&smem_limits_lock);
    return limit;
}

} // namespace

/* ============================================================== interface */

namespace simt {

int barrier(int kind, int pred, const char *what, const char *file, int line)
{
    fiber *f = tls_fiber;
    if (!f) return 0; /* outside a kernel */
    runner *r = f->r;
    char who[96];
    if (r->done > 0) {
        thread_str(f, who, sizeof who);
        block_error(r, "%s reached %s at %s:%d after %d thread(s) of the block exited: a barrier some threads never "
                       "reach", who, what, base_name(file), line, r->done);
        abandon(f);
    }
    if (r->bar_arrived == 0) {
        r->bar_kind = kind;
        r->bar_what = what;
        r->bar_file = file;
        r->bar_line = line;
        r->bar_count = 0;
        r->bar_and = 1;
        r->bar_or = 0;
    } else if (r->bar_line != line || strcmp(r->bar_file, file) || r->bar_kind != kind) {
        thread_str(f, who, sizeof who);
        block_error(r, "%s reached %s at %s:%d while %d thread(s) wait at %s at %s:%d (divergent barrier)", who, what,
                    base_name(file), line, r->bar_arrived, r->bar_what, base_name(r->bar_file), r->bar_line);
        abandon(f);
    }
    r->bar_arrived++;
    r->bar_count += pred;
    r->bar_and &= pred;
    r->bar_or |= pred;
    if (r->bar_arrived == r->n) {
        int result = kind == BARRIER_COUNT ? r->bar_count : kind == BARRIER_AND ? r->bar_and
                   : kind == BARRIER_OR ? r->bar_or : 0;
        for (int i = 0; i < r->n; i++) {
            fiber *t = &r->fibers[i];
            if (t->state == F_BARRIER) {
                t->state = F_READY;
                t->result = (uint64_t)result;
            }
        }
        r->bar_arrived = 0;
        return result;
    }
    f->state = F_BARRIER;
    f->wait_what = what;
    f->wait_file = file;
    f->wait_line = line;
    yield_to_scheduler(f, false);
    return (int)f->result;
}

/* Source lane of a shuffle, as PTX shfl.sync defines it (b: lane/delta/mask, c: clamp | segment << 8). */
static int shfl_source(int kind, int lane, int b, int c)
{
    int bval = b & 31, cval = c & 31, segmask = (c >> 8) & 31;
    int max_lane = (lane & segmask) | (cval & ~segmask);
    int min_lane = lane & segmask;
    int j;
    bool ok;
    switch (kind) {
    case SHFL_UP: j = lane - bval; ok = j >= max_lane; break;
    case SHFL_DOWN: j = lane + bval; ok = j <= max_lane; break;
    case SHFL_BFLY: j = lane ^ bval; ok = j <= max_lane; break;
    default: j = min_lane | (bval & ~segmask); ok = j <= max_lane; break;
    }
    return ok ? j : lane; /* out of the segment: a lane keeps its own value */
}

/* The last lane of a group arrived: compute every lane's result and wake them. */
static void complete_group(runner *r, int wi, warp_group *g, fiber *self)
{
    warp_state *w = &r->warps[wi];
    unsigned ballot = 0, all_same = 1;
    uint64_t first = 0;
    uint32_t sum = 0, u_min = 0xffffffffu, u_max = 0, v_and = 0xffffffffu, v_or = 0, v_xor = 0;
    int32_t i_min = INT32_MAX, i_max = INT32_MIN;
    bool have_first = false;
    for (int lane = 0; lane < 32; lane++) {
        if (!(g->mask >> lane & 1u)) continue;
        uint64_t v = w->value[lane];
        uint32_t v32 = (uint32_t)v;
        if (v) ballot |= 1u << lane;
        if (!have_first) { first = v; have_first = true; }
        else if (v != first) all_same = 0;
        sum += v32;
        u_min = v32 < u_min ? v32 : u_min;
        u_max = v32 > u_max ? v32 : u_max;
        i_min = (int32_t)v32 < i_min ? (int32_t)v32 : i_min;
        i_max = (int32_t)v32 > i_max ? (int32_t)v32 : i_max;
        v_and &= v32;
        v_or |= v32;
        v_xor ^= v32;
    }
    for (int lane = 0; lane < 32; lane++) {
        if (!(g->mask >> lane & 1u)) continue;
        uint64_t res = 0;
        switch (g->kind) {
        case SHFL_IDX: case SHFL_UP: case SHFL_DOWN: case SHFL_BFLY: {
            int j = shfl_source(g->kind, lane, w->b[lane], w->c[lane]);
            /* A lane outside the mask did not take part: CUDA leaves the value undefined. */
            res = (g->mask >> j & 1u) ? w->value[j] : ~(uint64_t)0;
            break;
        }
        case BALLOT: res = ballot; break;
        case ANY: res = ballot != 0; break;
        case ALL: res = ballot == g->mask; break;
        case SYNCWARP: res = 0; break;
        case MATCH_ANY: {
            unsigned m = 0;
            for (int k = 0; k < 32; k++)
                if ((g->mask >> k & 1u) && w->value[k] == w->value[lane]) m |= 1u << k;
            res = m;
            break;
        }
        case MATCH_ALL: res = all_same ? g->mask : 0; break;
        case REDUCE_ADD: res = sum; break;
        case REDUCE_MIN_U: res = u_min; break;
        case REDUCE_MAX_U: res = u_max; break;
        case REDUCE_MIN_I: res = (uint32_t)i_min; break;
        case REDUCE_MAX_I: res = (uint32_t)i_max; break;
        case REDUCE_AND: res = v_and; break;
        case REDUCE_OR: res = v_or; break;
        default: res = v_xor; break;
        }
        fiber *t = &r->fibers[wi * 32 + lane];
        t->result = res;
        if (t != self) t->state = F_READY;
    }
    *g = w->groups[--w->ngroups]; /* remove the group */
}

uint64_t warp_collective(int kind, unsigned mask, uint64_t value, int b, int c, const char *what, const char *file,
                         int line)
{
    fiber *f = tls_fiber;
    if (!f) return 0;
    runner *r = f->r;
    warp_state *w = &r->warps[f->warp];
    const unsigned bit = 1u << f->lane;
    char who[96], lanes[128];
    if ((mask & bit) && !(mask & ~w->exists) && !(mask & w->exited)) who[0] = '\0';
    else thread_str(f, who, sizeof who);
    if (!(mask & bit)) {
        block_error(r, "%s calls %s at %s:%d with mask 0x%08x, which does not include its own lane", who, what,
                    base_name(file), line, mask);
        abandon(f);
    }
    if (mask & ~w->exists) {
        lanes_str(mask & ~w->exists, lanes, sizeof lanes);
        block_error(r, "%s calls %s at %s:%d with mask 0x%08x naming lanes %s, which do not exist (the block has %d "
                       "threads)", who, what, base_name(file), line, mask, lanes, r->n);
        abandon(f);
    }
    if (mask & w->exited) {
        lanes_str(mask & w->exited, lanes, sizeof lanes);
        block_error(r, "%s calls %s at %s:%d with mask 0x%08x, but lanes %s have exited (divergent warp)", who, what,
                    base_name(file), line, mask, lanes);
        abandon(f);
    }
    warp_group *g = NULL;
    for (int i = 0; i < w->ngroups; i++)
        if (w->groups[i].mask & bit) g = &w->groups[i];
    if (g && (g->kind != kind || g->mask != mask)) {
        thread_str(f, who, sizeof who);
        lanes_str(g->arrived, lanes, sizeof lanes);
        block_error(r, "%s calls %s(mask 0x%08x) at %s:%d while lanes %s wait for it in %s(mask 0x%08x) at %s:%d "
                       "(divergent warp)", who, what, mask, base_name(file), line, lanes, g->what, g->mask,
                    base_name(g->file), g->line);
        abandon(f);
    }
    if (!g) {
        for (int i = 0; i < w->ngroups; i++)
            if (w->groups[i].mask & mask) {
                warp_group *o = &w->groups[i];
                thread_str(f, who, sizeof who);
                lanes_str(o->arrived, lanes, sizeof lanes);
                block_error(r, "%s calls %s(mask 0x%08x) at %s:%d while lanes %s of that mask wait in %s(mask "
                               "0x%08x) at %s:%d (divergent warp)", who, what, mask, base_name(file), line, lanes,
                            o->what, o->mask, base_name(o->file), o->line);
                abandon(f);
            }
        g = &w->groups[w->ngroups++];
        g->mask = mask;
        g->arrived = 0;
        g->kind = kind;
        g->what = what;
        g->file = file;
        g->line = line;
    }
    w->value[f->lane] = value;
    w->b[f->lane] = b;
    w->c[f->lane] = c;
    g->arrived |= bit;
    if (g->arrived == g->mask) {
        complete_group(r, f->warp, g, f);
        return f->result;
    }
    f->state = F_WARP;
    f->wait_what = what;
    f->wait_file = file;
    f->wait_line = line;
    f->wait_mask = mask;
    yield_to_scheduler(f, false);
    return f->result;
}

unsigned active_mask()
{
    fiber *f = tls_fiber;
    if (!f) return 0;
    warp_state *w = &f->r->warps[f->warp];
    return w->exists & ~w->exited;
}

void fail(const char *file, int line, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fiber *f = tls_fiber;
    if (!f) {
        set_last_error(SIMT_ERR_LAUNCH_FAILURE, "%s (at %s:%d, outside a kernel)", buf, base_name(file), line);
        return;
    }
    char who[96];
    thread_str(f, who, sizeof who);
    block_error(f->r, "%s: %s at %s:%d", who, buf, base_name(file), line);
    abandon(f);
}

int launch_failed(int err, const char *kernel_name, const char *file, int line, const char *why)
{
    return set_last_error(err, "kernel %s (launched at %s:%d): %s", kernel_name, base_name(file), line, why);
}

int launch(launch_base *c, const void *kernel_key)
{
    const dim3 b = c->block, g = c->grid;
    uint64_t threads = (uint64_t)b.x * b.y * b.z;
    char why[256];
    int err = 0;
    if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024) {
        snprintf(why, sizeof why, "block (%u,%u,%u) is not a valid block: 1..1024 threads, x,y <= 1024, z <= 64",
                 b.x, b.y, b.z);
        err = SIMT_ERR_INVALID_CONFIGURATION;
    } else if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
        snprintf(why, sizeof why, "grid (%u,%u,%u) is not a valid grid: x in 1..2^31-1, y,z in 1..65535", g.x, g.y,
                 g.z);
        err = SIMT_ERR_INVALID_CONFIGURATION;
    } else {
        size_t limit = dynamic_smem_limit(kernel_key);
        if (c->dynamic_smem > limit) {
            snprintf(why, sizeof why, "%zu bytes of dynamic shared memory exceed the kernel's limit of %zu%s",
                     c->dynamic_smem, limit,
                     limit == SIMT_DEFAULT_DYNAMIC_SMEM
                         ? " (raise it with cudaFuncSetAttribute(MaxDynamicSharedMemorySize), up to 232448)"
                         : "");
            err = SIMT_ERR_INVALID_VALUE;
        }
    }
    if (err) {
        launch_failed(err, c->kernel_name, c->file, c->line, why);
        c->destroy(c);
        return err;
    }
    if (c->stream) {
        if (simt_stream_enqueue(c->stream, c) != 0) {
            launch_failed(SIMT_ERR_MEMORY_ALLOCATION, c->kernel_name, c->file, c->line,
                          "out of host memory queueing the launch");
            c->destroy(c);
            return SIMT_ERR_MEMORY_ALLOCATION;
        }
        return 0;
    }
    /* No stream: the layer's own tests run the grid now and report here. */
    char msg[1024];
    int failed = execute(c, msg, sizeof msg);
    c->destroy(c);
    if (failed) {
        if (error_hook) error_hook(msg);
        return set_last_error(SIMT_ERR_LAUNCH_FAILURE, "%s", msg);
    }
    return 0;
}

} // namespace simt

/* ============================================================ C interface */

extern "C" {

int simt_run_queued(void *closure)
{
    simt::launch_base *c = (simt::launch_base *)closure;
    char msg[1024];
    int failed = execute(c, msg, sizeof msg);
    if (failed) {
        record_stream_error(c->stream, msg);
        if (error_hook) error_hook(msg);
    }
    c->destroy(c);
    return failed;
}

int simt_last_error(void)
{
    int e = tls_last_error;
    tls_last_error = 0;
    return e;
}

const char *simt_last_error_message(void) { return tls_last_message; }

int simt_take_stream_error(void *stream, char *buf, size_t len)
{
    pthread_mutex_lock(&stream_errors_lock);
    stream_error *e = unlink_stream_error(stream);
    pthread_mutex_unlock(&stream_errors_lock);
    if (!e) return 0;
    if (buf && len) snprintf(buf, len, "%s", e->message);
    free(e);
    return 1;
}

void simt_forget_stream(void *stream) { simt_take_stream_error(stream, NULL, 0); }

void simt_set_error_hook(void (*hook)(const char *message)) { error_hook = hook; }

int simt_threads(void)
{
    static int threads;
    int t = __atomic_load_n(&threads, __ATOMIC_RELAXED);
    if (t) return t;
    const char *env = getenv("SIMT_THREADS");
    t = env ? atoi(env) : 2;
    if (t < 1) t = 1;
    if (t > 64) t = 64;
    __atomic_store_n(&threads, t, __ATOMIC_RELAXED);
    return t;
}

int simt_excluded_kernel(const char *file, const char *reason)
{
    return set_last_error(SIMT_ERR_NOT_SUPPORTED, "the kernels of %s are excluded from the SIMT layer (%s); they run "
                          "only on a real GPU", file, reason);
}

int simt_set_max_dynamic_smem_key(const void *kernel, int bytes)
{
    if (bytes < 0 || bytes > SIMT_MAX_DYNAMIC_SMEM)
        return set_last_error(SIMT_ERR_INVALID_VALUE, "cudaFuncSetAttribute: %d bytes of dynamic shared memory: the "
                              "limit is %d", bytes, SIMT_MAX_DYNAMIC_SMEM);
    pthread_mutex_lock(&smem_limits_lock);
    smem_limit *s = smem_limits;
    while (s && s->kernel != kernel) s = s->next;
    if (!s && (s = (smem_limit *)malloc(sizeof *s))) {
        s->kernel = kernel;
        s->next = smem_limits;
        smem_limits = s;
    }
    if (s) s->bytes = bytes;
    pthread_mutex_unlock(&smem_limits_lock);
    if (!s) return set_last_error(SIMT_ERR_MEMORY_ALLOCATION, "cudaFuncSetAttribute: out of host memory");
    return 0;
}

} // extern "C"
