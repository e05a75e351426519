/* The with_stack tracer: every Python function call (and, with c_calls, every call of a builtin /
 * C function) becomes a range in the event store, recorded from C: sys.monitoring callbacks on
 * Python 3.12+, a PyEval_SetProfile function before.
 * Threads: callbacks run on the calling thread with the GIL held; start/stop hold the GIL. The
 * GIL serialises the name cache, the session state and the event store (events.c).
 *
 * Rules (tests/test_with_stack.py checks each):
 * - Names are resolved once per code object / C function, not per call: an open-addressing map
 *   pointer -> interned name id, holding a reference to each key object so its address cannot be
 *   reused while cached; emptied at stop. A call costs a lookup and an event-store push.
 *   python_function: "{file}({co_firstlineno}): {co_name}", the file relative to its sys.path
 *   entry (torch.profiler's spelling; py_codename.c). cpu_op (c_calls): "{module}.{name}" for functions (torch._C._nn.linear,
 *   builtins.len), "{type}.{name}" for methods, the defining type named as in reprs (list.append,
 *   torch._C.TensorBase.add); the key is the PyMethodDef, so a method descriptor (3.12 CALL) and
 *   the bound method 3.11 makes for it per call share one entry. cprof's own functions (push,
 *   pop, module hooks) are never recorded. Only builtin functions and method descriptors count as
 *   C calls (as in the legacy profiler): classes and other callables do not.
 * - The tracer's ranges live on their own per-thread stack in the event store (events.c
 *   push_traced_on/pop_traced_on), apart from the user's: a cprof.push left open in a traced function,
 *   a record_function entered in one frame and exited in another, or a pop in another function
 *   than its push never closes a tracer range, and the tracer never closes a user range. Record
 *   depths count both stacks, so nesting in the trace and self times stay exact.
 * - cprof's own code is not traced: a code object whose co_filename starts with own_prefix
 *   (cprof's package directory, from cprof/_pystack.py) is own (ID_OWN): not recorded, and
 *   nothing under it is either (Python calls, C calls, user code it calls back: on_trace_ready
 *   run by profile.step(), a module name resolver; documented so). Except own code taking both
 *   *args and **kwargs, a decorator's pass-through wrapper (cprof.range on a function,
 *   profile_function, bucket timers; the tests check cprof has no other): ID_PASS, not recorded
 *   but its callees are. A C call whose caller is own code (either kind) is not recorded.
 * - A per-thread shadow stack mirrors the thread's Python frames (and recorded C calls): an
 *   entry is a key (code object / PyMethodDef) and a tag: recorded (a range opened), OWN (an
 *   own frame, counted in the thread's suppression depth: while > 0 a call pushes QUIET and
 *   records nothing), PASS or QUIET (not recorded). The frames running at the thread's first
 *   call event of a session (entered before start) are seeded then as QUIET / OWN / PASS: their
 *   returns pop those, and cprof's own frames that called tracer_start stay suppressing. A
 *   Python exit whose code is not on top closes down to its own entry (a missed C return cannot
 *   wedge the stack); one not on the stack is ignored. A C return pops only its own recorded
 *   entry on top. Shadow stacks of an older session are dropped lazily (gen). User code's hot
 *   path only gains tests of the suppression depth, the cached id and (C calls) the top tag.
 * - Generators: yield closes the range, resume (and throw()) opens a new one: a range per run.
 *   An own generator's yield ends its suppression, its resume starts it again.
 * - min_duration: a range shorter than it is taken back at its end if it is the thread's last
 *   record (events.c), so a short range with a kept child (user range, long callee) is kept.
 * - Windows: start needs an open window; the tracer then records into whichever window is open
 *   (a schedule's warmup -> active restart closes and reopens it under the tracer). A window
 *   that closes first closes and flags truncated the tracer ranges open in it, as it does user
 *   ranges; with no window open, calls are tracked (depth) but not recorded; tracer_stop still
 *   cleans up. tracer_stop closes the ranges still open (the frames that called it) then,
 *   and the user ranges and operators still open inside them, truncated, so they nest.
 * - 3.11 threads: the profile function is set on every thread that exists at start (threads
 *   that already run another profile function are skipped and counted) and, through
 *   threading.setprofile (cprof/_pystack.py), on threading threads started later; threads
 *   started by C code later are not traced. 3.12+: sys.monitoring covers every thread. */
#define PY_SSIZE_T_CLEAN
#include "py_binding.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <structmember.h>

#include "cprof.h"

#if PY_VERSION_HEX >= 0x030C0000
#define TRACER_MONITORING 1
#else
#define TRACER_MONITORING 0
#endif

/* ---- session state (GIL) ---- */

static struct {
    int active;
    int c_calls;
    uint8_t c_cat;         /* C calls' category: cpu_op, or python_function (torch's spelling)
                            * when the window captures torch's operators itself */
    int running;           /* record the user frames running at a thread's first event */
    uint64_t min_ns;
    uint64_t gen;          /* session number: shadow stacks of another session are stale */
    uint64_t calls, discarded, errors, overflows;
    uint64_t suppressed;   /* calls not recorded: cprof's own code and what it called */
    char *own_prefix;      /* co_filename prefix of cprof's own code (UTF-8), or NULL */
    size_t own_len;
    uint32_t full_id;      /* name used when the name table is full */
    int tool_id;           /* 3.12+: the sys.monitoring tool id held, -1 when none */
    uint64_t threads, threads_skipped; /* 3.11: threads the profile function was set on */
    PyObject *hook;        /* _tracer_thread_hook: 3.11 threading hook and sys.getprofile() */
} tr = {.tool_id = -1};

/* ---- name cache: key pointer -> name id, or one of these ---- */

#define ID_SKIP 0u               /* a C function of a cprof module: not recorded */
#define ID_OWN UINT32_MAX        /* cprof's own Python code: not recorded, suppresses callees */
#define ID_PASS (UINT32_MAX - 1) /* an own pass-through wrapper: its Python callees are traced */
#define ID_REGION (1u << 30)     /* flag: a compiled region's code (py_regions.c), a user range */
_Static_assert(CPROF_MAX_NAMES < ID_PASS, "ID_OWN / ID_PASS must not be name ids");

typedef struct {
    const void *key;
    PyObject *ref;         /* keeps the key's memory alive while cached, or NULL */
    uint32_t id;
} cache_slot;

static cache_slot *cache;
static size_t cache_mask, cache_used;

CPROF_INLINE size_t hash_ptr(const void *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    return (size_t)((x * 0x9E3779B97F4A7C15ull) >> 32);
}

CPROF_INLINE cache_slot *cache_find(const void *key) {
    size_t i = hash_ptr(key) & cache_mask;
    for (;;) {
        cache_slot *s = &cache[i];
        if (s->key == key || s->key == NULL) return s;
        i = (i + 1) & cache_mask;
    }
}

static int cache_alloc(size_t cap) {
    cache_slot *c = calloc(cap, sizeof *c);
    if (!c) return -1;
    cache_slot *old = cache;
    size_t old_cap = cache ? cache_mask + 1 : 0;
    cache = c;
    cache_mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key) *cache_find(old[i].key) = old[i];
    free(old);
    return 0;
}

/* Adds key; ref is stolen. Grows at half load, so lookups stay short. The key may have been
 * added meanwhile (resolving can run Python code, which can let another thread in): the entry
 * there is kept. */
static int cache_insert(const void *key, PyObject *ref, uint32_t id) {
    if ((cache_used + 1) * 2 > cache_mask + 1 && cache_alloc((cache_mask + 1) * 2) < 0) {
        Py_XDECREF(ref);
        return -1;
    }
    cache_slot *s = cache_find(key);
    if (s->key) {
        Py_XDECREF(ref);
        return 0;
    }
    s->key = key;
    s->ref = ref;
    s->id = id;
    cache_used++;
    return 0;
}

static void cache_clear(void) {
    if (!cache) return;
    /* detach first: a dealloc below may run Python code */
    size_t cap = cache_mask + 1;
    cache_slot *c = malloc(cap * sizeof *c);
    if (c) memcpy(c, cache, cap * sizeof *c);
    memset(cache, 0, cap * sizeof *cache);
    cache_used = 0;
    if (!c) return; /* out of memory: the references leak rather than risk a dangling key */
    for (size_t i = 0; i < cap; i++) Py_XDECREF(c[i].ref);
    free(c);
}

/* ---- name resolution (once per key; may create objects) ---- */

static int intern_str(PyObject *s, uint32_t *id) {
    Py_ssize_t len;
    PyObject *bytes = NULL;
    const char *p = PyUnicode_AsUTF8AndSize(s, &len);
    if (!p) {
        /* lone surrogates: kept as bytes; the writer turns them into U+FFFD */
        PyErr_Clear();
        bytes = PyUnicode_AsEncodedString(s, "utf-8", "surrogatepass");
        if (!bytes) return -1;
        p = PyBytes_AS_STRING(bytes);
        len = PyBytes_GET_SIZE(bytes);
    }
    int rc = cprof_names_intern(p, (size_t)len, id);
    Py_XDECREF(bytes);
    if (rc == CPROF_E_FULL) {
        *id = tr.full_id;
        return 0;
    }
    if (rc) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int code_name(PyCodeObject *co, uint32_t *id) {
    PyObject *s = cprof_py_code_name(co);
    if (!s) return -1;
    int rc = intern_str(s, id);
    Py_DECREF(s);
    return rc;
}

/* ID_OWN when co is cprof's own code (its co_filename lies under own_prefix), ID_PASS when that
 * code takes both *args and **kwargs (a decorator's wrapper forwarding them to the user's
 * function: cprof.range as a decorator, profile_function, the bucket timers), else 0. */
static uint32_t own_code(PyCodeObject *co) {
    if (!tr.own_prefix) return 0;
    Py_ssize_t len;
    const char *p = PyUnicode_AsUTF8AndSize(co->co_filename, &len);
    if (!p) {
        PyErr_Clear();
        return 0;
    }
    if ((size_t)len <= tr.own_len || memcmp(p, tr.own_prefix, tr.own_len) != 0) return 0;
    int pass = (co->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) == (CO_VARARGS | CO_VARKEYWORDS);
    return pass ? ID_PASS : ID_OWN;
}

/* The cache key of a C callable the tracer records, or NULL for any other callable. */
CPROF_INLINE const void *c_key(PyObject *f) {
    if (PyCFunction_Check(f)) return ((PyCFunctionObject *)f)->m_ml;
    if (Py_IS_TYPE(f, &PyMethodDescr_Type)) return ((PyMethodDescrObject *)f)->d_method;
    return NULL;
}

/* Slow path of a lookup: resolves, caches, and gives the id (ID_SKIP, ID_OWN, ID_PASS or a
 * name). Never leaves an exception set: a failure is counted and reported by tracer_stop. */
static CPROF_NOINLINE int resolve(const void *key, PyObject *obj, int is_code, uint32_t *id) {
    SAVE_EXC(saved);
    PyObject *ref = NULL;
    int skip = 0, rc = -1;
    if (is_code) {
        ref = Py_NewRef(obj);
        if ((*id = own_code((PyCodeObject *)obj)) != 0) {
            rc = 0;
        } else if (cprof_py_regions_lookup(obj, id)) { /* 3.11: the regions' profile hook */
            *id |= ID_REGION;                           /* is ours, so the tracer names them */
            rc = 0;
        } else {
            rc = code_name((PyCodeObject *)obj, id);
        }
    } else {
        PyObject *s = cprof_py_c_name(obj, &ref, &skip);
        if (s) {
            rc = skip ? 0 : intern_str(s, id);
            if (skip) *id = ID_SKIP;
            Py_DECREF(s);
        }
    }
    if (rc == 0) rc = cache_insert(key, ref, *id);
    else Py_XDECREF(ref);
    if (rc < 0) {
        PyErr_Clear();
        tr.errors++;
    }
    RESTORE_EXC(saved);
    return rc;
}

/* ---- per-thread shadow stacks ---- */

#define TAG_OWN ((uintptr_t)1)   /* an own frame: counted in suppress */
#define TAG_QUIET ((uintptr_t)2) /* a frame not recorded (under suppression, or seeded) */
#define TAG_PASS ((uintptr_t)3)  /* an own pass-through frame: not recorded, nor its C calls */
#define TAG_MASK ((uintptr_t)3)  /* keys (code objects, PyMethodDefs) are 8-byte aligned */

typedef struct {
    uint64_t gen;
    uint32_t depth, cap;
    uint32_t suppress; /* OWN entries on the stack: while > 0 nothing is recorded */
    uintptr_t *ent;    /* key | tag */
    void *ev;          /* the thread's event state (cprof_events_thread), set with gen */
    const void *exited_ahead; /* 3.12+: a frame the regions' callback closed ahead of this
                               * event's own callback (cprof_py_tracer_exit_ahead), or NULL;
                               * here, not in a thread-local of its own, so a Python exit
                               * takes one thread-local lookup, not two */
} shadow_t;

static _Thread_local shadow_t *tls_shadow;
static pthread_key_t shadow_exit_key;
static pthread_once_t shadow_once = PTHREAD_ONCE_INIT;

static void shadow_free(void *p) {
    shadow_t *sh = p;
    free(sh->ent);
    free(sh);
}

static void shadow_key_make(void) { pthread_key_create(&shadow_exit_key, shadow_free); }

static int shadow_reserve(shadow_t *sh, uint32_t n) {
    if (n <= sh->cap) return 0;
    uint32_t ncap = sh->cap ? sh->cap : 128;
    while (ncap < n) ncap *= 2;
    uintptr_t *ne = realloc(sh->ent, ncap * sizeof *ne);
    if (!ne) return -1;
    sh->ent = ne;
    sh->cap = ncap;
    return 0;
}

CPROF_INLINE PyCodeObject *frame_code(PyFrameObject *f) {
    PyCodeObject *co = PyFrame_GetCode(f);
    Py_DECREF(co); /* borrowed: the frame holds its code */
    return co;
}

static void seed_record(shadow_t *sh, const int *lines);

/* Starts this thread's stack of the session with the frames running now, which were entered
 * before start (callbacks are not re-entered, so no call came in between): QUIET entries, OWN
 * for cprof's own. top: the event's frame (3.11) or NULL (the current frame); entering: the
 * code of a frame being entered, which is left out when it is top, or NULL. A frame that
 * cannot be reached (no memory) is left out: its return then pops nothing. */
static void shadow_seed(shadow_t *sh, PyFrameObject *top, PyCodeObject *entering) {
    SAVE_EXC(saved);
    sh->depth = 0;
    sh->suppress = 0;
    PyFrameObject *f = top ? top : PyEval_GetFrame(); /* borrowed */
    Py_XINCREF(f);
    if (f && entering && frame_code(f) == entering) {
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    int *lines = NULL; /* each entry's current line (torch names running frames by it) */
    uint32_t lines_cap = 0;
    while (f) { /* innermost first, reversed below */
        if (shadow_reserve(sh, sh->depth + 1) < 0) {
            tr.errors++;
            Py_DECREF(f);
            break;
        }
        if (sh->depth >= lines_cap) {
            uint32_t ncap = lines_cap ? lines_cap * 2 : 64;
            int *nl = realloc(lines, ncap * sizeof *nl);
            if (nl) {
                lines = nl;
                lines_cap = ncap;
            }
        }
        if (sh->depth < lines_cap) lines[sh->depth] = PyFrame_GetLineNumber(f);
        PyCodeObject *co = frame_code(f);
        uint32_t own = own_code(co);
        uintptr_t tag = own == ID_OWN ? TAG_OWN : own == ID_PASS ? TAG_PASS : TAG_QUIET;
        sh->ent[sh->depth++] = (uintptr_t)co | tag;
        sh->suppress += tag == TAG_OWN;
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    if (PyErr_Occurred()) {
        PyErr_Clear();
        tr.errors++;
    }
    for (uint32_t i = 0, j = sh->depth; i + 1 < j; i++, j--) {
        uintptr_t t = sh->ent[i];
        sh->ent[i] = sh->ent[j - 1];
        sh->ent[j - 1] = t;
        if (lines && lines_cap >= sh->depth) {
            int l = lines[i];
            lines[i] = lines[j - 1];
            lines[j - 1] = l;
        }
    }
    seed_record(sh, lines && lines_cap >= sh->depth ? lines : NULL);
    free(lines);
    RESTORE_EXC(saved);
}

/* This thread's shadow stack, of this session (seeded at its first call event) and with room
 * for one more entry, or NULL (no memory). */
static CPROF_NOINLINE shadow_t *shadow_slow(PyFrameObject *top, PyCodeObject *entering) {
    shadow_t *sh = tls_shadow;
    if (!sh) {
        sh = calloc(1, sizeof *sh);
        if (!sh) return NULL;
        tls_shadow = sh;
        pthread_setspecific(shadow_exit_key, sh);
    }
    if (sh->gen != tr.gen) {
        if (!(sh->ev = cprof_events_thread())) return NULL;
        sh->gen = tr.gen;
        sh->exited_ahead = NULL;
        shadow_seed(sh, top, entering);
    }
    return shadow_reserve(sh, sh->depth + 1) < 0 ? NULL : sh;
}

CPROF_INLINE shadow_t *shadow_for_push(PyFrameObject *top, PyCodeObject *entering) {
    shadow_t *sh = tls_shadow;
    if (CPROF_LIKELY(sh && sh->gen == tr.gen && sh->depth < sh->cap)) return sh;
    return shadow_slow(top, entering);
}

/* This thread's shadow stack if it has entries of this session, else NULL. A thread with no
 * call event yet in this session is not seeded here: its frames that return were entered
 * before start, and the first call event seeds the ones left. */
CPROF_INLINE shadow_t *shadow_for_pop(void) {
    shadow_t *sh = tls_shadow;
    return (sh && sh->gen == tr.gen && sh->depth) ? sh : NULL;
}

/* ---- events ---- */

CPROF_INLINE void pop_recorded(shadow_t *sh) {
    sh->depth--;
    if (cprof_events_pop_traced_on(sh->ev, tr.min_ns) == 1) tr.discarded++;
}

static void pop_one(shadow_t *sh) {
    uintptr_t tag = sh->ent[sh->depth - 1] & TAG_MASK;
    if (!tag) {
        pop_recorded(sh);
        return;
    }
    sh->depth--;
    if (tag == TAG_OWN) sh->suppress--;
}

/* The id of key: from the cache, else resolved. -1: not resolved, or the session stopped while
 * resolving ran Python code. */
CPROF_INLINE int lookup(const void *key, PyObject *obj, int is_code, uint32_t *id) {
    cache_slot *s = cache_find(key);
    if (CPROF_LIKELY(s->key != NULL)) {
        *id = s->id;
        return 0;
    }
    uint64_t gen = tr.gen;
    if (resolve(key, obj, is_code, id) < 0) return -1;
    return gen == tr.gen ? 0 : -1;
}

/* The name of co running at line (a seeded frame), interned into *id; -1 (counted, *id left
 * as it was) when it cannot be made. */
static int at_line_name(PyCodeObject *co, int line, uint32_t *id) {
    SAVE_EXC(saved);
    PyObject *s = cprof_py_code_name_at(co, line);
    uint32_t nid;
    int rc = s ? intern_str(s, &nid) : -1;
    Py_XDECREF(s);
    if (rc == 0) *id = nid;
    else {
        PyErr_Clear();
        tr.errors++;
    }
    RESTORE_EXC(saved);
    return rc;
}

/* The seeded user frames outside cprof's own (the caller of `with profile`, main, <module>;
 * a thread's whole stack) are recorded as running since now, as torch.profiler records the
 * frames running at its start, if the thread has no record yet in this window; what own code
 * runs stays unrecorded (events.c thread_fresh; window_enter reopens them in later windows). */
static void seed_record(shadow_t *sh, const int *lines) {
    uint32_t id;
    if (!tr.running || !cprof_events_thread_fresh(sh->ev)) return;
    for (uint32_t i = 0; i < sh->depth && (sh->ent[i] & TAG_MASK) != TAG_OWN; i++) {
        PyCodeObject *co = (PyCodeObject *)(sh->ent[i] & ~TAG_MASK);
        if ((sh->ent[i] & TAG_MASK) != TAG_QUIET) continue; /* an own pass-through wrapper */
        if (lookup(co, (PyObject *)co, 1, &id) < 0) break;    /* the session stopped */
        if (id < ID_PASS && !(id & ID_REGION) && lines && lines[i] >= 0 &&
            lines[i] != co->co_firstlineno)
            at_line_name(co, lines[i], &id); /* keeps the code's name if this fails */
        /* an entry becomes recorded only with its slot pushed: entries and slots pair up */
        if (id < ID_PASS && cprof_events_push_traced_on(sh->ev, id & ~ID_REGION,
                (id & ID_REGION) ? CPROF_CAT_USER_ANNOTATION : CPROF_CAT_PYTHON_FUNCTION) == 0)
            sh->ent[i] = (uintptr_t)co;
    }
}

CPROF_INLINE void record(shadow_t *sh, const void *key, uint32_t id, uint8_t cat) {
    if (CPROF_UNLIKELY(cprof_events_push_traced_on(sh->ev, id, cat) != CPROF_OK)) {
        tr.overflows++;
        return;
    }
    sh->ent[sh->depth++] = (uintptr_t)key;
    tr.calls++;
}

static CPROF_NOINLINE void push_quiet(shadow_t *sh, const void *key, uintptr_t tag) {
    sh->ent[sh->depth++] = (uintptr_t)key | tag;
    if (tag == TAG_OWN) sh->suppress++;
    tr.suppressed++;
}

/* A Python frame starts (call, generator resume or throw). top: its frame on 3.11, NULL on
 * 3.12+ (the current frame). */
CPROF_INLINE void py_enter(PyCodeObject *co, PyFrameObject *top) {
    if (CPROF_UNLIKELY(!tr.active)) return;
    shadow_t *sh = shadow_for_push(top, co);
    if (CPROF_UNLIKELY(!sh)) {
        tr.errors++;
        return;
    }
    if (CPROF_UNLIKELY(sh->suppress)) {
        push_quiet(sh, co, TAG_QUIET);
        return;
    }
    uint32_t id;
    if (lookup(co, (PyObject *)co, 1, &id) < 0) return;
    if (CPROF_UNLIKELY(id >= ID_PASS)) {
        push_quiet(sh, co, id == ID_OWN ? TAG_OWN : TAG_PASS);
        return;
    }
    record(sh, co, id & ~ID_REGION,
           (id & ID_REGION) ? CPROF_CAT_USER_ANNOTATION : CPROF_CAT_PYTHON_FUNCTION);
}

/* A caller that is not on top of the shadow stack (an entry that could not be pushed): own? */
static CPROF_NOINLINE int caller_is_own(PyCodeObject *caller) {
    uint32_t id;
    return caller && lookup(caller, (PyObject *)caller, 1, &id) == 0 && id >= ID_PASS;
}

/* A C function is called from the Python frame top (3.11; NULL on 3.12+) running caller. */
CPROF_INLINE void c_enter(PyObject *callable, PyCodeObject *caller, PyFrameObject *top) {
    const void *key = c_key(callable);
    if (!key || CPROF_UNLIKELY(!tr.active)) return;
    shadow_t *sh = shadow_for_push(top, NULL);
    if (CPROF_UNLIKELY(!sh)) {
        tr.errors++;
        return;
    }
    /* the caller is normally the top entry: recorded, seeded QUIET or own PASS */
    uintptr_t e = sh->depth ? sh->ent[sh->depth - 1] : 0;
    if (CPROF_UNLIKELY(sh->suppress) ||
        (CPROF_LIKELY((e & ~TAG_MASK) == (uintptr_t)caller) ? (e & TAG_MASK) == TAG_PASS
                                                            : caller_is_own(caller))) {
        tr.suppressed++;
        return;
    }
    uint32_t id;
    if (lookup(key, callable, 0, &id) < 0 || id == ID_SKIP) return;
    record(sh, key, id, tr.c_cat);
}

static CPROF_NOINLINE void exit_not_on_top(shadow_t *sh, const void *code) {
    uint32_t i = sh->depth;
    while (i > 0 && (sh->ent[i - 1] & ~TAG_MASK) != (uintptr_t)code) i--;
    if (i == 0) return; /* entered before start, or not pushed: nothing of ours to close */
    while (sh->depth >= i) pop_one(sh);
}

/* A Python frame ends (return, yield, unwind). */
CPROF_INLINE void py_exit(PyCodeObject *co) {
    shadow_t *sh = tls_shadow;
    if (!sh) return;
#if TRACER_MONITORING
    if (CPROF_UNLIKELY(sh->exited_ahead != NULL)) {
        const void *done = sh->exited_ahead;
        sh->exited_ahead = NULL;
        if (done == (const void *)co) return; /* this very exit, closed already */
    }
#endif
    if (sh->gen != tr.gen || !sh->depth) return; /* as shadow_for_pop */
    if (CPROF_LIKELY(sh->ent[sh->depth - 1] == (uintptr_t)co)) pop_recorded(sh);
    else exit_not_on_top(sh, co);
}

CPROF_INLINE void c_exit(PyObject *callable) {
    const void *key = c_key(callable);
    shadow_t *sh = key ? shadow_for_pop() : NULL;
    if (sh && sh->ent[sh->depth - 1] == (uintptr_t)key) pop_recorded(sh);
}

/* ---- Python 3.12+: sys.monitoring ---- */
#if TRACER_MONITORING

/* py_regions.c, at a compiled region's frame exit: sys.monitoring calls a higher tool id's
 * callback first, and the regions hold a higher id than the tracer (so the region opens
 * before the frame's python_function). The frame's range is closed here, before the region's,
 * so the region encloses it; the tracer's own callback for the same exit then does nothing. */
void cprof_py_tracer_exit_ahead(const void *code, int regions_tool) {
    /* a lower id's callbacks run after the tracer's: the frame is closed already, and the top
     * entry is its caller (a recursive region's own code: closed early, its exit skipped) */
    if (tr.tool_id < 0 || regions_tool <= tr.tool_id) return;
    shadow_t *sh = shadow_for_pop();
    if (!sh || sh->ent[sh->depth - 1] != (uintptr_t)code) return; /* not ours to close */
    pop_recorded(sh);
    sh->exited_ahead = code;
}

/* Callbacks: (code, offset[, value]) for PY_*, (code, offset, callable, arg0) for calls.
 * Each is an object of the small type below, whose vectorcall sys.monitoring calls directly:
 * a builtin function (PyCFunction, METH_FASTCALL) would add cfunction_vectorcall_FASTCALL's
 * recursion check and thread-state lookup to every event (~38 instructions of a traced call's
 * ~750 on 3.12.1, twice per call). Nothing here calls back into Python on the fast path; the
 * slow path (resolve) runs through the C API, which does its own checks. */
static PyObject *mon_py_start(PyObject *self, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames) {
    (void)self;
    (void)kwnames;
    if (CPROF_LIKELY(PyVectorcall_NARGS(nargsf) >= 1 && PyCode_Check(args[0])))
        py_enter((PyCodeObject *)args[0], NULL);
    Py_RETURN_NONE;
}

static PyObject *mon_py_exit(PyObject *self, PyObject *const *args, size_t nargsf,
                             PyObject *kwnames) {
    (void)self;
    (void)kwnames;
    if (CPROF_LIKELY(PyVectorcall_NARGS(nargsf) >= 1 && PyCode_Check(args[0])))
        py_exit((PyCodeObject *)args[0]);
    Py_RETURN_NONE;
}

static PyObject *mon_call(PyObject *self, PyObject *const *args, size_t nargsf,
                          PyObject *kwnames) {
    (void)self;
    (void)kwnames;
    if (CPROF_LIKELY(PyVectorcall_NARGS(nargsf) >= 3))
        c_enter(args[2], PyCode_Check(args[0]) ? (PyCodeObject *)args[0] : NULL, NULL);
    Py_RETURN_NONE;
}

static PyObject *mon_c_exit(PyObject *self, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames) {
    (void)self;
    (void)kwnames;
    if (CPROF_LIKELY(PyVectorcall_NARGS(nargsf) >= 3)) c_exit(args[2]);
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    const char *name;
} MonCallbackObject;

static PyObject *mon_cb_repr(MonCallbackObject *self) {
    return PyUnicode_FromFormat("<cprof with_stack callback %s>", self->name);
}

static PyMemberDef mon_cb_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(MonCallbackObject, vectorcall), READONLY,
     NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot mon_cb_slots[] = {
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_repr, mon_cb_repr},
    {Py_tp_members, mon_cb_members},
    {0, NULL},
};

static PyType_Spec mon_cb_spec = {
    .name = "cprof._C._MonitoringCallback",
    .basicsize = sizeof(MonCallbackObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = mon_cb_slots,
};

static const struct {
    vectorcallfunc fn;
    const char *name;
} mon_defs[] = {
    {mon_py_start, "py_start"},
    {mon_py_exit, "py_exit"},
    {mon_call, "call"},
    {mon_c_exit, "c_exit"},
};
static PyObject *mon_cb[4];
static PyTypeObject *mon_cb_type; /* made once, at module init (cprof_py_tracer_add) */

static PyObject *mon_cb_new(int i) {
    MonCallbackObject *o = PyObject_New(MonCallbackObject, mon_cb_type);
    if (!o) return NULL;
    o->vectorcall = mon_defs[i].fn;
    o->name = mon_defs[i].name;
    return (PyObject *)o;
}

static const struct {
    const char *event;
    int cb;     /* index in mon_defs */
    int c_call; /* only with c_calls */
} mon_events[] = {
    {"PY_START", 0, 0},  {"PY_RESUME", 0, 0}, {"PY_THROW", 0, 0},
    {"PY_RETURN", 1, 0}, {"PY_YIELD", 1, 0},  {"PY_UNWIND", 1, 0},
    {"CALL", 2, 1},      {"C_RETURN", 3, 1},  {"C_RAISE", 3, 1},
};
#define MON_NEVENTS (sizeof mon_events / sizeof mon_events[0])

/* Disables the events, unregisters the callbacks and frees the tool id (py_monitoring.c). */
static int uninstall(void) {
    if (tr.tool_id < 0) return 0;
    const char *names[MON_NEVENTS];
    for (size_t i = 0; i < MON_NEVENTS; i++) names[i] = mon_events[i].event;
    int rc = cprof_monitoring_release(tr.tool_id, names, MON_NEVENTS);
    tr.tool_id = -1;
    return rc;
}

static int install(PyObject *module) {
    for (int i = 0; i < 4; i++) {
        if (!mon_cb[i] && !(mon_cb[i] = mon_cb_new(i))) return -1;
    }
    if (cprof_monitoring_take(module, "cprof", &tr.tool_id) < 0) return -1;
    const char *names[MON_NEVENTS];
    PyObject *cbs[MON_NEVENTS];
    size_t n = 0;
    for (size_t i = 0; i < MON_NEVENTS; i++) {
        if (mon_events[i].c_call && !tr.c_calls) continue;
        names[n] = mon_events[i].event;
        cbs[n++] = mon_cb[mon_events[i].cb];
    }
    if (cprof_monitoring_enable(tr.tool_id, names, cbs, n) == 0) return 0;
    SAVE_EXC(err);
    uninstall();
    PyErr_Clear();
    RESTORE_EXC(err);
    return -1;
}

/* ---- Python 3.11: PyEval_SetProfile on each thread ---- */
#else

static int tracer_profile(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg) {
    (void)obj;
    if (CPROF_UNLIKELY(!tr.active)) return 0;
    switch (what) {
    case PyTrace_CALL: py_enter(frame_code(frame), frame); break;
    case PyTrace_RETURN: py_exit(frame_code(frame)); break;
    case PyTrace_C_CALL: /* frame: the caller's */
        if (tr.c_calls && arg) c_enter(arg, frame_code(frame), frame);
        break;
    case PyTrace_C_RETURN:
    case PyTrace_C_EXCEPTION:
        if (tr.c_calls && arg) c_exit(arg);
        break;
    default: break;
    }
    return 0;
}

static int ours(PyThreadState *ts) {
    return ts->c_profilefunc == tracer_profile || (tr.hook && ts->c_profileobj == tr.hook);
}

static int uninstall(void) {
    int rc = 0;
    PyThreadState *me = PyThreadState_Get();
    PyInterpreterState *interp = PyThreadState_GetInterpreter(me);
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
         ts = PyThreadState_Next(ts)) {
        if (!ours(ts)) continue;
        if (_PyEval_SetProfile(ts, NULL, NULL) < 0) {
            PyErr_Clear(); /* an audit hook refused: that thread's function stays, inactive */
            rc = -1;
        }
    }
    return rc;
}

static int install(PyObject *module) {
    PyThreadState *me = PyThreadState_Get();
    if (me->c_profilefunc && !ours(me)) {
        PyObject *err = PyObject_GetAttrString(module, "CprofError");
        if (err) {
            PyErr_SetString(err, "another profile function is set on this thread "
                                 "(sys.setprofile: cProfile, torch.profiler with_stack?); "
                                 "stop it first, or use Python 3.12+ where both can run");
            Py_DECREF(err);
        }
        return -1;
    }
    if (_PyEval_SetProfile(me, tracer_profile, tr.hook) < 0) return -1;
    cprof_py_traced_reset();
    cprof_py_traced_note(me);
    PyInterpreterState *interp = PyThreadState_GetInterpreter(me);
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
         ts = PyThreadState_Next(ts)) {
        if (ts == me) continue;
        if (ts->c_profilefunc) { /* another profiler's thread: leave it alone */
            if (!ours(ts)) tr.threads_skipped++;
            continue;
        }
        if (_PyEval_SetProfile(ts, tracer_profile, tr.hook) < 0) {
            SAVE_EXC(err);
            uninstall();
            RESTORE_EXC(err);
            return -1;
        }
        cprof_py_traced_note(ts);
        tr.threads++;
    }
    return 0;
}

static int event_what(PyObject *ev) {
    static const struct {
        const char *name;
        int what;
    } map[] = {{"call", PyTrace_CALL},     {"return", PyTrace_RETURN},
               {"c_call", PyTrace_C_CALL}, {"c_return", PyTrace_C_RETURN},
               {"c_exception", PyTrace_C_EXCEPTION}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (PyUnicode_CompareWithASCIIString(ev, map[i].name) == 0) return map[i].what;
    return -1;
}

/* threading.setprofile hook (and what sys.getprofile() shows while tracing): run by a new
 * threading thread as a Python profile function, it puts the C function in its place and hands
 * it the event it was called for. */
static PyObject *thread_hook(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    PyThreadState *me = PyThreadState_Get();
    if (!tr.active) {
        if (_PyEval_SetProfile(me, NULL, NULL) < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (_PyEval_SetProfile(me, tracer_profile, tr.hook) < 0) return NULL;
    cprof_py_traced_note(me);
    tr.threads++;
    if (nargs == 3 && PyFrame_Check(args[0]) && PyUnicode_Check(args[1])) {
        int what = event_what(args[1]);
        if (what >= 0)
            tracer_profile(NULL, (PyFrameObject *)args[0], what,
                           args[2] == Py_None ? NULL : args[2]);
    }
    Py_RETURN_NONE;
}
#endif

/* ---- module functions ---- */

static PyObject *raise_state(PyObject *module, const char *msg) {
    PyObject *err = PyObject_GetAttrString(module, "WindowStateError");
    if (err) {
        PyErr_SetString(err, msg);
        Py_DECREF(err);
    }
    return NULL;
}

static void own_prefix_set(char *p) {
    free(tr.own_prefix);
    tr.own_prefix = p;
    tr.own_len = p ? strlen(p) : 0;
}

static PyObject *tracer_start(PyObject *module, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"c_calls", "min_duration_ns", "own_prefix", "strip_prefixes",
                             "running_frames", "c_calls_as_ops", NULL};
    int c_calls = 0, running = 1, as_ops = 1;
    long long min_ns = 0;
    const char *own = NULL;
    PyObject *strip_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|pLzOpp", kwlist, &c_calls, &min_ns, &own,
                                     &strip_obj, &running, &as_ops))
        return NULL;
    if (min_ns < 0) {
        PyErr_SetString(PyExc_ValueError, "min_duration_ns must be >= 0");
        return NULL;
    }
    if (own && !*own) {
        PyErr_SetString(PyExc_ValueError, "own_prefix must not be empty (None: no own code)");
        return NULL;
    }
    if (tr.active) return raise_state(module, "the with_stack tracer is already running");
    if (!cprof_events_active())
        return raise_state(module, "the with_stack tracer needs an open cprof window: start "
                                   "one (ProfilerContext / _C.start()) first");
    if (!cache && cache_alloc(1024) < 0) return PyErr_NoMemory();
    char *own_copy = NULL;
    if (own && !(own_copy = strdup(own))) return PyErr_NoMemory();
    if (cprof_py_code_name_strip(strip_obj) < 0) {
        free(own_copy);
        return NULL;
    }
    own_prefix_set(own_copy); /* the cache is empty: nothing was resolved with an older one */
    /* the session is live before events are enabled: they may fire at once */
    tr.c_calls = c_calls;
    tr.c_cat = as_ops ? CPROF_CAT_CPU_OP : CPROF_CAT_PYTHON_FUNCTION;
    tr.running = running;
    tr.min_ns = (uint64_t)min_ns;
    tr.gen++;
    tr.calls = tr.discarded = tr.errors = tr.overflows = tr.suppressed = 0;
    tr.threads = tr.threads_skipped = 0;
    tr.active = 1;
    if (install(module) < 0) {
        tr.active = 0;
        tr.gen++;
        cprof_events_close_traced_all();
        cache_clear();
        own_prefix_set(NULL);
        cprof_py_code_name_strip(NULL);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *tracer_stop(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    if (!tr.active) Py_RETURN_NONE;
    uint64_t stop_ns = cprof_clock_now_ns(); /* the frames still running end after this */
#if TRACER_MONITORING
    int tool_id = tr.tool_id;
    PyObject *lost = PyList_New(0);
#else
    int tool_id = -1;
    PyObject *lost = cprof_py_traced_lost(ours); /* another profile function took over */
#endif
    if (!lost) { /* no memory for the list: the rest of the stop still runs */
        PyErr_Clear();
        lost = Py_NewRef(Py_None);
    }
    int rc = uninstall();
    tr.active = 0;
    tr.gen++; /* every thread's shadow stack is stale from here */
    cprof_events_close_traced_all();
    cache_clear();
    own_prefix_set(NULL);
    cprof_py_code_name_strip(NULL);
    if (rc < 0 && PyErr_Occurred()) {
        Py_DECREF(lost);
        return NULL;
    }
    return Py_BuildValue("{sKsKsKsKsKsisKsKsssNsK}", "calls", (unsigned long long)tr.calls,
                         "discarded", (unsigned long long)tr.discarded, "errors",
                         (unsigned long long)tr.errors, "overflows",
                         (unsigned long long)tr.overflows, "suppressed",
                         (unsigned long long)tr.suppressed, "tool_id", tool_id, "threads",
                         (unsigned long long)tr.threads, "threads_skipped",
                         (unsigned long long)tr.threads_skipped, "backend",
                         TRACER_MONITORING ? "sys.monitoring" : "setprofile", "replaced", lost,
                         "stop_ns", (unsigned long long)stop_ns);
}

/* Tests: this thread's shadow stack in this session, or None (no call event yet / stopped). */
static PyObject *tracer_shadow(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    shadow_t *sh = tls_shadow;
    if (!tr.active || !sh || sh->gen != tr.gen) Py_RETURN_NONE;
    uint32_t n[4] = {0};
    for (uint32_t i = 0; i < sh->depth; i++) n[sh->ent[i] & TAG_MASK]++;
    return Py_BuildValue("{sIsIsIsIsI}", "depth", sh->depth, "suppress", sh->suppress,
                         "recorded", n[0], "own", n[TAG_OWN], "quiet", n[TAG_QUIET], "pass",
                         n[TAG_PASS]);
}

static PyObject *tracer_active(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyBool_FromLong(tr.active);
}

static PyMethodDef tracer_methods[] = {
    {"tracer_start", (PyCFunction)(void (*)(void))tracer_start, METH_VARARGS | METH_KEYWORDS,
     "tracer_start(c_calls=False, min_duration_ns=0, own_prefix=None, strip_prefixes=None, "
     "running_frames=True, c_calls_as_ops=True): records Python calls (and C calls: cpu_op "
     "ranges, or python_function ones with c_calls_as_ops=False) as ranges in the open window, "
     "and the user frames already running (running_frames); code under own_prefix (cprof's "
     "own) and what it calls are not recorded."},
    {"tracer_stop", (PyCFunction)tracer_stop, METH_NOARGS,
     "Stops the tracer; returns its counts (None if it was not running)."},
    {"tracer_active", (PyCFunction)tracer_active, METH_NOARGS, "True while the tracer runs."},
    {"_tracer_shadow", (PyCFunction)tracer_shadow, METH_NOARGS,
     "Internal (tests): this thread's shadow stack: depth, suppress, entries by tag."},
#if !TRACER_MONITORING
    {"_tracer_thread_hook", (PyCFunction)(void (*)(void))thread_hook, METH_FASTCALL,
     "Internal: threading.setprofile hook that installs the C tracer on a new thread."},
#endif
    {NULL, NULL, 0, NULL},
};

int cprof_py_tracer_add(PyObject *m) {
    pthread_once(&shadow_once, shadow_key_make);
    static const char full_marker[] = "[cprof: name table full]";
    if (cprof_names_intern(full_marker, sizeof full_marker - 1, &tr.full_id)) {
        PyErr_NoMemory();
        return -1;
    }
    if (PyModule_AddFunctions(m, tracer_methods) < 0) return -1;
#if !TRACER_MONITORING
    if (!tr.hook && !(tr.hook = PyObject_GetAttrString(m, "_tracer_thread_hook"))) return -1;
#else
    if (!mon_cb_type &&
        !(mon_cb_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &mon_cb_spec, NULL)))
        return -1;
#endif
    return 0;
}
