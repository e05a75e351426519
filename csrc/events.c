/* The event store: per-thread buffers of fixed-size range records in pooled chunks, bounded by
 * a byte cap with counted drops.
 * Threads: push/pop/start/stop are called with the GIL held, which serialises every mutation of
 * a thread's buffer and of the window state (so the hot path takes no lock and no atomic RMW).
 * The registry mutex only guards the thread list against thread-exit destructors; the chunk pool
 * (chunk_pool.c) has its own mutex because snapshots are freed with the GIL released.
 * The exception is torch's operators (ops_itt.c): they begin and end in C++ with the GIL released,
 * on any thread. Their push/pop take the thread's own op lock (uncontended: only stop and the
 * stats ever take another thread's), and stop takes each thread's op lock while it detaches that
 * thread's records. Async ranges (torch's collectives: begun on one thread, ended on any) sit in
 * a table under their own mutex, which stop empties before it detaches the threads' records.
 * Lock order: registry, then a thread's op lock, then the async table, then the pool. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cprof.h"

typedef struct tstate {
    struct tstate *next;
    uint64_t tid, ident;
    uint64_t rf_tid;           /* torch's RecordFunction thread id, once an op told it */
    uint32_t name_id;
    _Atomic int dead;          /* set by the thread-exit destructor; freed at the next stop */
    _Atomic uint64_t dead_ns;  /* when it exited (0: unknown): its open ranges end there */
    uint64_t window_id;        /* the window the chunks below belong to */
    cprof_chunk *head, *tail;
    uint32_t room;             /* records the tail takes on the fast path: a chunk's worth, or
                                * 0 once the cap refused this thread a chunk in this window
                                * (then only ProfilerStep ranges are kept, see slot_slow) */
    uint64_t nrecords, dropped;
    cprof_record **stack;      /* open ranges; NULL entries were not recorded */
    uint64_t *seq;             /* per stack entry: its token (push_token), 0 for plain pushes */
    uint64_t next_seq;
    uint32_t depth, stack_cap;
    cprof_record **tstack;     /* the Python tracer's open ranges (py_tracer.c), kept apart */
    uint64_t *tname;           /* per tracer slot: its name id | cat << 32, to reopen it in a
                                * later window (a frame still running when a window opens) */
    uint32_t tdepth, tstack_cap;
    cprof_record **ostack;     /* torch operators' open ranges (ops_itt.c), under oplock */
    uint32_t odepth, ostack_cap;
    const cprof_record *last_op; /* the operator opened last on this thread (compared only) */
    _Atomic int oplock;        /* held by this thread around an operator push/pop, by stop */
    int hook_pending;          /* registered from C without the GIL, or outside a window:
                                * name it at its next GIL-held record in a window */
} tstate;

static _Thread_local tstate *tls;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static tstate *registry;

static int g_active;           /* read on every push, written under the GIL; operator pushes
                                * (no GIL) read it with an acquire load under their op lock.
                                * 0: no window; 1: recording; 2: open, CPU collection toggled
                                * off (toggle_collection_dynamic): pushes record nothing but
                                * ProfilerStep ranges, and are counted in g_toggled_off */
static uint64_t g_toggled_off; /* ranges not recorded in this window while toggled off */
static uint64_t g_window_id;
static uint64_t g_start_ns;
static uint32_t g_key_seq, g_key_fwd; /* "Sequence number", "Fwd thread id" (0: not interned) */

static void (*new_thread_hook)(void); /* the binding's: names a thread at its first record */

int cprof_events_set_cap(uint64_t bytes) {
    if (bytes < sizeof(cprof_chunk)) return CPROF_E_ARG;
    if (g_active) return CPROF_E_STATE;
    return cprof_pool_set_cap(bytes);
}

/* ---- thread registration ---- */

static void on_thread_exit(void *p) {
    /* Runs without the GIL after the thread's last Python code: only flag it. Under the
     * registry lock, which the reaper holds too, so the flag and the free that follows are
     * ordered for any checker (Helgrind does not model C11 atomics). */
    uint64_t now = cprof_clock_now_ns();
    pthread_mutex_lock(&registry_lock);
    atomic_store_explicit(&((tstate *)p)->dead_ns, now, memory_order_relaxed);
    atomic_store_explicit(&((tstate *)p)->dead, 1, memory_order_release);
    pthread_mutex_unlock(&registry_lock);
}

static void make_exit_key(void) { pthread_key_create(&exit_key, on_thread_exit); }

static void name_from_pthread(tstate *t) {
    char buf[64] = {0};
    if (pthread_getname_np(pthread_self(), buf, sizeof buf) == 0 && buf[0]) {
        uint32_t id;
        if (cprof_names_intern(buf, strlen(buf), &id) == CPROF_OK) t->name_id = id;
    }
}

static void reap_dead_locked(void);

/* from_python: the caller holds the GIL, so the binding's hook may name the thread now;
 * otherwise (an operator on a C++ thread) the OS name stands in until a GIL-held record. */
static CPROF_NOINLINE tstate *register_thread(int from_python) {
    pthread_once(&exit_key_once, make_exit_key);
    tstate *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->stack_cap = 64;
    t->stack = malloc(t->stack_cap * sizeof *t->stack);
    t->seq = malloc(t->stack_cap * sizeof *t->seq);
    if (!t->stack || !t->seq) {
        free(t->stack);
        free(t->seq);
        free(t);
        return NULL;
    }
    t->tid = (uint64_t)syscall(SYS_gettid);
    t->ident = (uint64_t)pthread_self();
    pthread_setspecific(exit_key, t);
    pthread_mutex_lock(&registry_lock);
    /* with no window open (none stopping either: a stop holds this lock throughout), the
     * threads that exited since the last stop go now: a program starting threads that
     * record outside windows (ranges cost nothing there) grew by each one until a window */
    if (!__atomic_load_n(&g_active, __ATOMIC_ACQUIRE)) reap_dead_locked();
    t->next = registry;
    registry = t;
    pthread_mutex_unlock(&registry_lock);
    tls = t;
    if (!from_python) {
        name_from_pthread(t);
        t->hook_pending = 1;
    } else if (new_thread_hook) {
        /* named at its first record in a window: a name interned outside one is kept for
         * the process's life, and a thread that only ever records outside (cprof.range
         * left in a request handler's code) would fill the name table */
        if (__atomic_load_n(&g_active, __ATOMIC_ACQUIRE)) new_thread_hook();
        else t->hook_pending = 1;
    }
    return t;
}

/* A thread first seen by an operator push gets the binding's name at its first GIL-held call. */
CPROF_INLINE tstate *gil_thread(void) {
    tstate *t = tls;
    if (CPROF_UNLIKELY(!t)) return register_thread(1);
    if (CPROF_UNLIKELY(t->hook_pending) && __atomic_load_n(&g_active, __ATOMIC_RELAXED)) {
        t->hook_pending = 0;
        if (new_thread_hook) new_thread_hook();
    }
    return t;
}

void cprof_events_set_new_thread_hook(void (*hook)(void)) { new_thread_hook = hook; }

static void tstate_free(tstate *t) {
    cprof_pool_put(t->head, 0);
    free(t->stack);
    free(t->seq);
    free(t->tstack);
    free(t->tname);
    free(t->ostack);
    free(t);
}

/* ---- hot path ---- */

static void link_chunk(tstate *t, cprof_chunk *c) {
    if (t->tail) t->tail->next = c;
    else t->head = c;
    t->tail = c;
}

/* The fast path's tail is full (or the thread is capped). Past the cap the window keeps its
 * steps: a ProfilerStep range may take a chunk beyond the cap (one per 1,024 steps), which
 * other ranges, dropped and counted from then on, do not use; the timeline keeps its steps. */
static CPROF_NOINLINE cprof_record *slot_slow(tstate *t, uint8_t cat) {
    if (t->tail && t->tail->count < CPROF_CHUNK_RECORDS)  /* capped: its reserve chunk */
        return cat == CPROF_CAT_STEP ? &t->tail->rec[t->tail->count++] : NULL;
    cprof_chunk *c = t->room ? cprof_pool_get(0) : NULL;
    if (c) {
        t->room = CPROF_CHUNK_RECORDS;
    } else {
        t->room = 0;
        if (cat != CPROF_CAT_STEP || !(c = cprof_pool_get(1))) return NULL;
    }
    link_chunk(t, c);
    return &t->tail->rec[t->tail->count++];
}

static CPROF_NOINLINE int stack_grow(tstate *t) {
    if (t->stack_cap >= CPROF_MAX_DEPTH) return CPROF_E_DEPTH;
    uint32_t ncap = t->stack_cap * 2;
    if (ncap > CPROF_MAX_DEPTH) ncap = CPROF_MAX_DEPTH;
    cprof_record **ns = realloc(t->stack, ncap * sizeof *ns);
    if (!ns) return CPROF_E_NOMEM;
    t->stack = ns;
    uint64_t *nq = realloc(t->seq, ncap * sizeof *nq);
    if (!nq) return CPROF_E_NOMEM; /* stack_cap unchanged: the bigger stack is just unused */
    t->seq = nq;
    t->stack_cap = ncap;
    return CPROF_OK;
}

/* A push while CPU collection is toggled off: only the profiler's step ranges are recorded,
 * which keep the timeline's steps; the others are counted. */
static CPROF_NOINLINE int toggled_off_skips(int active, uint8_t cat) {
    if (!active) return 1;
    if (cat == CPROF_CAT_STEP) return 0;
    __atomic_fetch_add(&g_toggled_off, 1, __ATOMIC_RELAXED); /* operator pushes: no GIL */
    return 1;
}

static void window_enter(tstate *t);

/* Reserves and opens this thread's next record, or returns NULL (no window, or CPU collection
 * toggled off: nothing recorded; memory cap: counted as dropped). Its depth counts the user's
 * and the tracer's open ranges. */
CPROF_INLINE cprof_record *record_open(tstate *t, uint32_t name_id, uint8_t cat) {
    int active = __atomic_load_n(&g_active, __ATOMIC_ACQUIRE);
    if (CPROF_UNLIKELY(active != 1) && toggled_off_skips(active, cat)) return NULL;
    if (CPROF_UNLIKELY(t->window_id != g_window_id)) window_enter(t);
    cprof_record *r; /* the thread is in this window from here: only the chunk may be full */
    if (CPROF_LIKELY(t->tail && t->tail->count < t->room))
        r = &t->tail->rec[t->tail->count++];
    else
        r = slot_slow(t, cat);
    if (CPROF_UNLIKELY(r == NULL)) {
        t->dropped++;
        return NULL;
    }
    uint32_t depth = t->depth + t->tdepth + t->odepth;
    t->nrecords++;
    r->end_ns = 0;
    r->name_id = name_id;
    r->cat = cat;
    r->flags = 0;
    r->depth = (uint16_t)(depth < CPROF_MAX_DEPTH ? depth : CPROF_MAX_DEPTH);
    r->nargs = 0;
    r->begin_ns = cprof_clock_now_ns(); /* last, so our bookkeeping is outside */
    return r;
}

/* The thread's first record in this window: its old chunks were detached at stop. Python frames
 * still running that the tracer recorded in an earlier window (or entered with no window open)
 * have NULL slots on its stack: each is opened again now, outermost first, so a long-running
 * function (the training loop around a schedule's windows, the frames seeded at tracer start)
 * encloses what it runs in every window, as torch.profiler's tracer records running frames at
 * each start. A slot's depth is its place under whatever this thread opens next. */
static CPROF_NOINLINE void window_enter(tstate *t) {
    t->window_id = g_window_id;
    t->head = t->tail = NULL;
    t->room = CPROF_CHUNK_RECORDS;
    t->nrecords = t->dropped = 0;
    for (uint32_t i = 0; i < t->tdepth; i++) {
        if (t->tstack[i] || !t->tname[i]) continue;
        cprof_record *r = record_open(t, (uint32_t)t->tname[i], (uint8_t)(t->tname[i] >> 32));
        if (!r) break; /* toggled off, or the memory cap: the rest stay unrecorded */
        uint32_t depth = t->depth + i + t->odepth;
        r->depth = (uint16_t)(depth < CPROF_MAX_DEPTH ? depth : CPROF_MAX_DEPTH);
        t->tstack[i] = r;
    }
}

/* A push with its stack entry's token (0: a plain push). */
CPROF_INLINE int push_seq(uint32_t name_id, uint8_t cat, uint64_t seq) {
    tstate *t = gil_thread();
    if (CPROF_UNLIKELY(!t)) return CPROF_E_NOMEM;
    if (CPROF_UNLIKELY(t->depth >= t->stack_cap)) {
        int rc = stack_grow(t);
        if (rc) return rc;
    }
    cprof_record *r = record_open(t, name_id, cat); /* before depth++: it records the depth */
    t->seq[t->depth] = seq;
    t->stack[t->depth++] = r;
    return CPROF_OK;
}

int cprof_events_push(uint32_t name_id, uint8_t cat) { return push_seq(name_id, cat, 0); }

#define DETACHED_BIT (1ull << 63) /* in a token: a range closed only by its token */
#define NAMED_BIT (1ull << 62)    /* a range closed by name (push_named); counters never get here */

/* Ends the range at stack entry i - 1 and takes the entry out. Ranges opened inside it stay
 * open: they end later, overlapping its end, as torch records a ProfilerStep that ends inside
 * a user's record_function. */
static void close_entry(tstate *t, uint32_t i, uint64_t now) {
    cprof_record *r = t->stack[i - 1];
    if (r) r->end_ns = now;
    uint32_t above = t->depth - i;
    memmove(&t->stack[i - 1], &t->stack[i], above * sizeof *t->stack);
    memmove(&t->seq[i - 1], &t->seq[i], above * sizeof *t->seq);
    t->depth--;
}

/* The innermost plain range, below ranges closed by token or by name: a pop() belongs to a
 * push(), never to a `with cprof.range` or a record_function opened after it. */
static CPROF_NOINLINE int pop_under_tokens(tstate *t, uint64_t now) {
    uint32_t i = t->depth;
    while (i > 0 && t->seq[i - 1]) i--;
    if (i == 0) return CPROF_E_EMPTY;
    close_entry(t, i, now);
    return CPROF_OK;
}

int cprof_events_pop(void) {
    uint64_t now = cprof_clock_now_ns(); /* first, so our bookkeeping is outside */
    tstate *t = tls;
    if (CPROF_UNLIKELY(!t || t->depth == 0)) return CPROF_E_EMPTY;
    if (CPROF_UNLIKELY(t->seq[t->depth - 1])) return pop_under_tokens(t, now);
    cprof_record *r = t->stack[--t->depth];
    if (r) r->end_ns = now;
    return CPROF_OK;
}

void cprof_events_pop_to(uint32_t depth) {
    uint64_t now = cprof_clock_now_ns();
    tstate *t = tls;
    if (!t) return;
    for (uint32_t i = t->depth; i > depth; i--)
        if (!t->seq[i - 1]) close_entry(t, i, now);
}

int cprof_events_pop_point(void) {
    tstate *t = tls;
    if (CPROF_UNLIKELY(!t || t->depth == 0)) return CPROF_E_EMPTY;
    if (CPROF_UNLIKELY(t->seq[t->depth - 1])) return CPROF_E_EMPTY;
    cprof_record *r = t->stack[--t->depth];
    if (r) r->end_ns = r->begin_ns;
    return CPROF_OK;
}

static int push_with_token(uint32_t name_id, uint8_t cat, uint64_t *token, uint64_t bits) {
    int rc = cprof_events_push(name_id, cat);
    if (rc) return rc;
    tstate *t = tls;
    *token = t->seq[t->depth - 1] = ++t->next_seq | bits;
    return CPROF_OK;
}

int cprof_events_push_token(uint32_t name_id, uint8_t cat, uint64_t *token) {
    return push_with_token(name_id, cat, token, 0);
}

int cprof_events_push_detached(uint32_t name_id, uint8_t cat, uint64_t *token) {
    return push_with_token(name_id, cat, token, DETACHED_BIT);
}

/* flags: record flags to add to the range closed (CPROF_REC_ASYNC when another thread ends it) */
static int pop_token_in(tstate *t, uint64_t token, uint64_t now, uint8_t flags) {
    if (CPROF_UNLIKELY(!t || !token)) return CPROF_E_EMPTY;
    uint32_t i = t->depth;
    while (i > 0 && t->seq[i - 1] != token) i--;
    if (i == 0) return CPROF_E_EMPTY; /* closed already (a plain pop took it) */
    if (flags && t->stack[i - 1]) t->stack[i - 1]->flags |= flags;
    close_entry(t, i, now);
    return CPROF_OK;
}

int cprof_events_pop_token(uint64_t token) {
    uint64_t now = cprof_clock_now_ns();
    return pop_token_in(tls, token, now, 0);
}

/* A named range's key on the stack: the innermost open one of that key and category is the
 * one an exit closes, wherever it sits (asyncio tasks interleave their ranges on one thread). */
#define NAMED_KEY(key, cat) (NAMED_BIT | (uint64_t)(cat) << 32 | (key))

int cprof_events_push_named(uint32_t name_id, uint8_t cat, uint32_t key) {
    return push_seq(name_id, cat, NAMED_KEY(key, cat));
}

int cprof_events_pop_named(uint32_t key, uint8_t cat) {
    uint64_t now = cprof_clock_now_ns(); /* first, so our bookkeeping is outside */
    tstate *t = tls;
    uint64_t k = NAMED_KEY(key, cat);
    if (CPROF_LIKELY(t && t->depth && t->seq[t->depth - 1] == k)) { /* nested: the top one */
        cprof_record *r = t->stack[--t->depth];
        if (r) r->end_ns = now;
        return CPROF_OK;
    }
    return pop_token_in(t, k, now, 0);
}

int cprof_events_pop_token_on(uint64_t ident, uint64_t token) {
    uint64_t now = cprof_clock_now_ns();
    if (tls && tls->ident == ident) return pop_token_in(tls, token, now, 0);
    /* another thread's stack: its pushes and pops hold the GIL, which we hold; a range another
     * thread ends is async (torch.profiler's is_async: its start and end threads differ) */
    int rc = CPROF_E_EMPTY;
    pthread_mutex_lock(&registry_lock);
    for (tstate *t = registry; t; t = t->next)
        if (t->ident == ident && !atomic_load(&t->dead)) {
            rc = pop_token_in(t, token, now, CPROF_REC_ASYNC);
            break;
        }
    pthread_mutex_unlock(&registry_lock);
    return rc;
}

/* ---- the Python tracer's ranges (py_tracer.c) ----
 * A second stack per thread: a user pop (cprof.pop, a range or record_function exit, perhaps in
 * another function than its push) never closes a tracer range, and the tracer never closes a
 * user range. Records share the thread's chunks, so begin order and depth stay exact. */

/* Doubles the tracer's or the operators' stack (64 entries first), up to CPROF_MAX_DEPTH. */
static CPROF_NOINLINE int side_stack_grow(cprof_record ***stack, uint32_t *cap) {
    uint32_t ncap = *cap ? *cap * 2 : 64;
    if (ncap > CPROF_MAX_DEPTH) ncap = CPROF_MAX_DEPTH;
    if (ncap <= *cap) return CPROF_E_DEPTH;
    cprof_record **ns = realloc(*stack, ncap * sizeof *ns);
    if (!ns) return CPROF_E_NOMEM;
    *stack = ns;
    *cap = ncap;
    return CPROF_OK;
}

void *cprof_events_thread(void) { return gil_thread(); }

static CPROF_NOINLINE int tstack_grow(tstate *t) {
    uint32_t cap = t->tstack_cap;
    int rc = side_stack_grow(&t->tstack, &cap);
    if (rc) return rc;
    uint64_t *nn = realloc(t->tname, cap * sizeof *nn);
    if (!nn) return CPROF_E_NOMEM; /* tstack_cap unchanged: the bigger stack is just unused */
    t->tname = nn;
    t->tstack_cap = cap;
    return CPROF_OK;
}

CPROF_INLINE int traced_push(tstate *t, uint32_t name_id, uint8_t cat, int open) {
    if (CPROF_UNLIKELY(!t)) return CPROF_E_NOMEM;
    if (CPROF_UNLIKELY(t->tdepth >= t->tstack_cap)) {
        int rc = tstack_grow(t);
        if (rc) return rc;
    }
    t->tname[t->tdepth] = name_id | (uint64_t)cat << 32;
    t->tstack[t->tdepth++] = open ? record_open(t, name_id, cat) : NULL;
    return CPROF_OK;
}

int cprof_events_push_traced_on(void *thread, uint32_t name_id, uint8_t cat) {
    return traced_push(thread, name_id, cat, 1);
}

int cprof_events_thread_fresh(void *thread) {
    tstate *t = thread;
    return t && (t->window_id != g_window_id || t->nrecords == 0);
}

int cprof_events_pop_traced_on(void *thread, uint64_t min_ns) {
    uint64_t now = cprof_clock_now_ns();
    tstate *t = thread;
    if (CPROF_UNLIKELY(!t || t->tdepth == 0)) return CPROF_E_EMPTY;
    cprof_record *r = t->tstack[--t->tdepth];
    if (!r) return CPROF_OK;
    r->end_ns = now;
    /* Only the thread's last record can be taken back without moving others; a short range
     * whose children were all taken back is last again, a range with a kept child is kept. */
    if (now - r->begin_ns < min_ns && t->tail->count && &t->tail->rec[t->tail->count - 1] == r) {
        t->tail->count--;
        t->nrecords--;
        return 1;
    }
    return CPROF_OK;
}

/* ---- torch operators (ops_itt.c): any thread, GIL not held ---- */

CPROF_INLINE void oplock_acquire(tstate *t) {
    while (atomic_exchange_explicit(&t->oplock, 1, memory_order_acquire)) sched_yield();
}

CPROF_INLINE void oplock_release(tstate *t) {
    atomic_store_explicit(&t->oplock, 0, memory_order_release);
}

/* Closes, truncated, the ranges of a stack still open that began at or after `from`; their
 * slots are forgotten (later pops consume NULL entries). Returns how many. */
static uint64_t truncate_from(cprof_record **stack, uint32_t depth, uint64_t from,
                              uint64_t now) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < depth; i++) {
        cprof_record *r = stack[i];
        if (!r || r->begin_ns < from) continue;
        r->end_ns = now;
        r->flags |= CPROF_REC_TRUNCATED;
        stack[i] = NULL;
        n++;
    }
    return n;
}

static uint64_t g_truncated_early; /* ranges closed by close_traced_all, for the snapshot */

/* The tracer stops (just before its window closes): the Python frames still running end now.
 * A user range or operator opened inside one of them and still open ends with it, truncated
 * (at the window's close, a little later, it would end after the frame that encloses it). */
void cprof_events_close_traced_all(void) {
    uint64_t now = cprof_clock_now_ns();
    pthread_mutex_lock(&registry_lock);
    for (tstate *t = registry; t; t = t->next) {
        uint64_t outer = UINT64_MAX; /* the outermost running frame's begin */
        for (uint32_t i = 0; i < t->tdepth; i++) {
            cprof_record *r = t->tstack[i];
            if (!r) continue;
            if (r->begin_ns < outer) outer = r->begin_ns;
            r->end_ns = now;
        }
        t->tdepth = 0;
        if (outer == UINT64_MAX || !g_active || t->window_id != g_window_id) continue;
        g_truncated_early += truncate_from(t->stack, t->depth, outer, now);
        oplock_acquire(t); /* operators push and pop without the GIL */
        g_truncated_early += truncate_from(t->ostack, t->odepth, outer, now);
        oplock_release(t);
    }
    pthread_mutex_unlock(&registry_lock);
}

CPROF_INLINE void set_seq(cprof_record *r, int64_t seq, uint64_t fwd_tid) {
    r->arg_key[0] = g_key_seq;
    r->arg_val[0] = seq;
    r->arg_key[1] = g_key_fwd;
    r->arg_val[1] = (int64_t)fwd_tid;
    r->nargs = 2;
}

/* "autograd::engine::evaluate_function: <node>", the engine's range around a backward node */
static int is_evaluate(uint32_t name_id) {
    static const char EV[] = "autograd::engine::evaluate_function: ";
    size_t len;
    const char *s = cprof_names_get(name_id, &len);
    return len >= sizeof EV - 1 && memcmp(s, EV, sizeof EV - 1) == 0;
}

/* Opens an operator's range on this thread's op stack: its args the fragment frag_id (0: none)
 * and, when seq >= 0 (torch gave the op a sequence number: an op under grad mode, an autograd
 * node), "Sequence number" and "Fwd thread id" as its two int args, for the fwdbwd links
 * (fwdbwd.c); rf_tid is this thread's RecordFunction id, the key of its forward ops. */
CPROF_INLINE int op_open(uint32_t name_id, uint32_t frag_id, int64_t seq,
                         uint64_t fwd_tid, uint64_t rf_tid) {
    tstate *t = tls;
    if (CPROF_UNLIKELY(!t) && !(t = register_thread(0))) return CPROF_E_NOMEM;
    oplock_acquire(t);
    int rc = CPROF_OK;
    if (CPROF_UNLIKELY(t->odepth >= t->ostack_cap)) rc = side_stack_grow(&t->ostack, &t->ostack_cap);
    if (CPROF_LIKELY(rc == CPROF_OK)) {
        cprof_record *r = record_open(t, name_id, CPROF_CAT_CPU_OP);
        if (r && frag_id) {
            r->reserved = frag_id;
            r->flags |= CPROF_REC_RAW_ARGS;
        }
        if (seq >= 0) {
            t->rf_tid = rf_tid;
            if (r && g_key_fwd) {
                set_seq(r, seq, fwd_tid);
                /* torch gives the engine's range around a node the node's numbers too, when
                 * the node is the next op on the thread (collection.cpp set_autograd_evaluate):
                 * not after a tensor hook's (retain_grad's) ops ran inside the range first */
                cprof_record *p = t->odepth ? t->ostack[t->odepth - 1] : NULL;
                if (fwd_tid && p && p == t->last_op && !p->nargs && is_evaluate(p->name_id))
                    set_seq(p, seq, fwd_tid);
            }
        }
        t->last_op = r;
        t->ostack[t->odepth++] = r;
    }
    oplock_release(t);
    return rc;
}

int cprof_events_push_op_args(uint32_t name_id, uint32_t frag_id) {
    return op_open(name_id, frag_id, -1, 0, 0);
}

int cprof_events_push_op_seq(uint32_t name_id, uint32_t frag_id, int64_t seq, uint64_t fwd_tid,
                             uint64_t rf_tid) {
    return op_open(name_id, frag_id, seq, fwd_tid, rf_tid);
}

void cprof_events_seq_keys(uint32_t *seq_key, uint32_t *fwd_key) {
    *seq_key = g_key_seq;
    *fwd_key = g_key_fwd;
}

int cprof_events_push_op(uint32_t name_id) { return cprof_events_push_op_args(name_id, 0); }

int cprof_events_pop_op(void) {
    uint64_t now = cprof_clock_now_ns();
    tstate *t = tls;
    if (CPROF_UNLIKELY(!t)) return CPROF_E_EMPTY;
    oplock_acquire(t);
    int rc = CPROF_E_EMPTY;
    if (CPROF_LIKELY(t->odepth)) {
        cprof_record *r = t->ostack[--t->odepth];
        if (r) r->end_ns = now; /* NULL: not recorded, or truncated by a stop */
        rc = CPROF_OK;
    }
    oplock_release(t);
    return rc;
}

int cprof_events_add_arg(uint32_t key_id, int64_t value) {
    tstate *t = tls;
    if (!t || t->depth == 0) return CPROF_E_EMPTY;
    cprof_record *r = t->stack[t->depth - 1];
    if (!r) return CPROF_OK; /* not recorded (outside a window or dropped): nothing to add to */
    if (r->nargs >= 2) return CPROF_E_FULL;
    r->arg_key[r->nargs] = key_id;
    r->arg_val[r->nargs] = value;
    r->nargs++;
    return CPROF_OK;
}

uint32_t cprof_events_depth(void) { return tls ? tls->depth : 0; }

int cprof_events_set_thread_name(uint32_t name_id) {
    tstate *t = tls;
    if (!t && !(t = register_thread(1))) return CPROF_E_NOMEM;
    t->hook_pending = 0;
    t->name_id = name_id;
    return CPROF_OK;
}

int cprof_events_set_raw_args(uint32_t frag_id) {
    tstate *t = tls;
    if (!t || t->depth == 0) return CPROF_E_EMPTY;
    cprof_record *r = t->stack[t->depth - 1];
    if (!r) return CPROF_OK; /* not recorded (outside a window or dropped) */
    r->reserved = frag_id;
    r->flags |= CPROF_REC_RAW_ARGS;
    return CPROF_OK;
}

int cprof_events_mark(uint8_t flags) {
    tstate *t = tls;
    if (!t || t->depth == 0) return CPROF_E_EMPTY;
    cprof_record *r = t->stack[t->depth - 1];
    if (r) r->flags |= flags;
    return CPROF_OK;
}

/* ---- async ranges: begun on one thread, ended on any (torch's async RecordFunctions) ----
 * The record is the opening thread's, on none of its stacks; the table maps a handle to it until
 * it is closed, or until stop closes it at the window's end, so a close that comes after stop
 * (the collective finished later) finds nothing and touches no snapshot's memory. */

typedef struct {
    uint64_t handle;
    cprof_record *rec;
} async_entry;

static pthread_mutex_t async_lock = PTHREAD_MUTEX_INITIALIZER;
static async_entry *async_tab;
static uint32_t async_n, async_cap;
static uint64_t async_next;

int cprof_events_async_open(uint32_t name_id, uint8_t cat, uint64_t *handle) {
    *handle = 0;
    tstate *t = tls;
    if (CPROF_UNLIKELY(!t) && !(t = register_thread(0))) return CPROF_E_NOMEM;
    int rc = CPROF_OK;
    oplock_acquire(t); /* stop waits for it: the window cannot close under this open */
    pthread_mutex_lock(&async_lock);
    if (async_n == async_cap) {
        uint32_t ncap = async_cap ? async_cap * 2 : 16;
        async_entry *nt = realloc(async_tab, ncap * sizeof *nt);
        if (nt) {
            async_tab = nt;
            async_cap = ncap;
        } else {
            rc = CPROF_E_NOMEM;
        }
    }
    if (rc == CPROF_OK) {
        cprof_record *r = record_open(t, name_id, cat);
        if (r) {
            r->flags |= CPROF_REC_ASYNC; /* torch marks an async RecordFunction is_async */
            *handle = ++async_next;
            async_tab[async_n++] = (async_entry){*handle, r};
        }
    }
    pthread_mutex_unlock(&async_lock);
    oplock_release(t);
    return rc;
}

int cprof_events_async_close(uint64_t handle) {
    uint64_t now = cprof_clock_now_ns();
    int rc = CPROF_E_EMPTY;
    if (!handle) return rc;
    pthread_mutex_lock(&async_lock);
    for (uint32_t i = 0; i < async_n; i++)
        if (async_tab[i].handle == handle) {
            async_tab[i].rec->end_ns = now;
            async_tab[i] = async_tab[--async_n];
            rc = CPROF_OK;
            break;
        }
    pthread_mutex_unlock(&async_lock);
    return rc;
}

/* stop: the ranges still open end with the window. Returns how many. */
static uint64_t async_truncate_all(uint64_t now) {
    pthread_mutex_lock(&async_lock);
    uint64_t n = async_n;
    for (uint32_t i = 0; i < async_n; i++) {
        async_tab[i].rec->end_ns = now;
        async_tab[i].rec->flags |= CPROF_REC_TRUNCATED;
    }
    async_n = 0;
    pthread_mutex_unlock(&async_lock);
    return n;
}

/* ---- windows ---- */

int cprof_events_active(void) { return g_active; }

/* Frees threads that have exited. Called only with no window open, so their data has been
 * detached already. Registry lock held. */
static void reap_dead_locked(void) {
    tstate **pp = &registry;
    while (*pp) {
        tstate *t = *pp;
        if (atomic_load_explicit(&t->dead, memory_order_acquire)) {
            *pp = t->next;
            tstate_free(t);
        } else {
            pp = &t->next;
        }
    }
}

/* ---- fork ----
 * A child forked inside a window (DataLoader workers, multiprocessing "fork") must not record
 * into, or write, the parent's window, and only the forking thread exists in it. Both mutexes
 * are held across fork() so the child never inherits one locked by a thread that is gone. */

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void) {
    pthread_mutex_lock(&registry_lock); /* the lock order: registry, async table, pool */
    pthread_mutex_lock(&async_lock);
    cprof_pool_lock();
}

static void atfork_parent(void) {
    cprof_pool_unlock();
    pthread_mutex_unlock(&async_lock);
    pthread_mutex_unlock(&registry_lock);
}

static void atfork_child(void) {
    atfork_parent();
    cprof_events_fork_child();
}

static void atfork_register(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

void cprof_events_fork_child(void) {
    tstate *me = tls;
    pthread_mutex_lock(&registry_lock);
    g_active = 0; /* the parent's window is not this process's: forgotten, never written */
    for (tstate *t = registry; t; t = t->next) {
        if (t != me) atomic_store_explicit(&t->dead, 1, memory_order_release); /* gone here */
        /* this copy of the window's records is the child's memory: back to its pool */
        if (t->window_id == g_window_id) {
            cprof_pool_put(t->head, 0);
            t->head = t->tail = NULL;
            t->nrecords = t->dropped = 0;
        }
        /* open ranges pointed into those chunks; pops still to come consume NULL entries */
        for (uint32_t i = 0; i < t->depth; i++) t->stack[i] = NULL;
        for (uint32_t i = 0; i < t->tdepth; i++) t->tstack[i] = NULL;
        for (uint32_t i = 0; i < t->odepth; i++) t->ostack[i] = NULL;
        atomic_store_explicit(&t->oplock, 0, memory_order_relaxed); /* its holder is gone */
    }
    if (me) me->tid = (uint64_t)syscall(SYS_gettid);
    pthread_mutex_lock(&async_lock);
    async_n = 0; /* their records went back to the pool above; a late close finds nothing */
    pthread_mutex_unlock(&async_lock);
    pthread_mutex_unlock(&registry_lock);
}

int cprof_events_start(int cpu_on) {
    if (g_active) return CPROF_E_STATE;
    pthread_once(&atfork_once, atfork_register);
    if (!g_key_fwd) { /* once; without them ops keep no sequence numbers (no fwdbwd links) */
        uint32_t ks = 0, kf = 0;
        static const char SEQ[] = "Sequence number", FWD[] = "Fwd thread id";
        if (cprof_names_intern(SEQ, sizeof SEQ - 1, &ks) == CPROF_OK &&
            cprof_names_intern(FWD, sizeof FWD - 1, &kf) == CPROF_OK) {
            g_key_seq = ks;
            g_key_fwd = kf;
        }
    }
    pthread_mutex_lock(&registry_lock);
    reap_dead_locked();
    g_window_id++;
    g_start_ns = cprof_clock_now_ns();
    __atomic_store_n(&g_toggled_off, 0, __ATOMIC_RELAXED);
    g_truncated_early = 0;
    /* after the id: operator pushes read it */
    __atomic_store_n(&g_active, cpu_on ? 1 : 2, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&registry_lock);
    return CPROF_OK;
}

int cprof_events_mark_start(void) {
    if (!g_active) return CPROF_E_STATE;
    pthread_mutex_lock(&registry_lock);
    g_start_ns = cprof_clock_now_ns();
    pthread_mutex_unlock(&registry_lock);
    return CPROF_OK;
}

int cprof_events_toggle_cpu(int on) {
    if (!g_active) return CPROF_E_STATE;
    __atomic_store_n(&g_active, on ? 1 : 2, __ATOMIC_RELEASE);
    return CPROF_OK;
}

int cprof_events_cpu_on(void) { return g_active == 1; }

void cprof_events_counts(uint64_t *stored, uint64_t *dropped) {
    uint64_t s = 0, d = 0;
    pthread_mutex_lock(&registry_lock);
    if (g_active) {
        for (tstate *t = registry; t; t = t->next) {
            oplock_acquire(t); /* operator pushes count without the GIL */
            if (t->window_id == g_window_id) {
                s += t->nrecords;
                d += t->dropped;
            }
            oplock_release(t);
        }
    }
    pthread_mutex_unlock(&registry_lock);
    if (stored) *stored = s;
    if (dropped) *dropped = d;
}

/* Closes the ranges still open on a stack at stop time; their slots now belong to the snapshot,
 * so the stack keeps NULL entries that later pops consume. Returns how many. */
static uint64_t truncate_open(cprof_record **stack, uint32_t depth, uint64_t now) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < depth; i++) {
        cprof_record *r = stack[i];
        if (!r) continue;
        r->end_ns = now < r->begin_ns ? r->begin_ns : now;
        r->flags |= CPROF_REC_TRUNCATED;
        stack[i] = NULL;
        n++;
    }
    return n;
}

int cprof_events_stop(cprof_snapshot **out) {
    if (!out) return CPROF_E_ARG;
    if (!g_active) return CPROF_E_STATE;
    uint64_t now = cprof_clock_now_ns();
    cprof_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) return CPROF_E_NOMEM;
    pthread_mutex_lock(&registry_lock);
    int was = g_active;
    __atomic_store_n(&g_active, 0, __ATOMIC_RELEASE);
    /* An operator push that saw the window open finishes before we take its thread's lock;
     * one that comes later sees it closed. Only then is each thread's window id stable. */
    for (tstate *t = registry; t; t = t->next) {
        oplock_acquire(t);
        oplock_release(t);
    }
    size_t n = 0;
    for (tstate *t = registry; t; t = t->next)
        if (t->window_id == g_window_id) n++;
    snap->threads = calloc(n ? n : 1, sizeof *snap->threads);
    if (!snap->threads) {
        /* keep the window open: nothing collected is lost, the caller may retry */
        __atomic_store_n(&g_active, was, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&registry_lock);
        free(snap);
        return CPROF_E_NOMEM;
    }
    /* async ranges still open end here, while their records are still the threads' */
    snap->truncated += async_truncate_all(now) + g_truncated_early;
    g_truncated_early = 0;
    for (tstate *t = registry; t; t = t->next) {
        if (t->window_id != g_window_id) continue;
        oplock_acquire(t); /* its open operators are closed below: no pop may race */
        cprof_thread_data *d = &snap->threads[snap->nthreads++];
        d->tid = t->tid;
        /* an exited thread's pthread ident may already be a new thread's: 0 keeps
         * rename_threads from giving it that thread's name */
        d->ident = atomic_load_explicit(&t->dead, memory_order_acquire) ? 0 : t->ident;
        d->name_id = t->name_id;
        d->rf_tid = t->rf_tid;
        d->nrecords = t->nrecords;
        d->dropped = t->dropped;
        d->chunks = t->head;
        cprof_pool_hold(t->head); /* results from now on: off the next window's cap */
        snap->nrecords += t->nrecords;
        snap->dropped += t->dropped;
        /* ranges still open: close them at stop time (at its exit for a thread that has
         * ended: it ran nothing after) and forget their slots, which now belong to the
         * snapshot */
        uint64_t died = atomic_load_explicit(&t->dead_ns, memory_order_relaxed);
        uint64_t end = died && died < now ? died : now;
        snap->truncated += truncate_open(t->stack, t->depth, end);
        snap->truncated += truncate_open(t->tstack, t->tdepth, end);
        snap->truncated += truncate_open(t->ostack, t->odepth, end);
        t->head = t->tail = NULL;
        t->nrecords = t->dropped = 0;
        oplock_release(t);
    }
    reap_dead_locked();
    pthread_mutex_unlock(&registry_lock);
    snap->window_id = g_window_id;
    snap->toggled_off = __atomic_load_n(&g_toggled_off, __ATOMIC_RELAXED);
    snap->start_ns = g_start_ns;
    snap->stop_ns = now;
    snap->unix_offset_ns = cprof_clock_unix_offset_ns();
    *out = snap;
    return CPROF_OK;
}

void cprof_snapshot_free(cprof_snapshot *snap) {
    if (!snap) return;
    for (size_t i = 0; i < snap->nthreads; i++) cprof_pool_put(snap->threads[i].chunks, 1);
    free(snap->threads);
    free(snap);
}
