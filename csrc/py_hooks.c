/* with_modules and record_shapes in C: the ModuleHooks type, which holds what a module range
 * needs and opens / closes one per module call, for either capture (cprof/_modules.py):
 * - "hooks": its pre/post methods are torch's global nn.Module forward hooks;
 * - "call": the ModuleCall object of py_modcall.c replaces nn.Module.__call__ and calls
 *   cprof_hooks_enter / cprof_hooks_exit (py_hooks.h) around the original.
 * A module's name comes from a pointer cache keyed by the module and the module whose forward
 * calls it (the Python resolver of cprof/_modules.py runs once per module and place); tensor
 * arguments become an interned JSON fragment ("Input Dims", "Input type") pasted into the
 * range's args.
 * Threads: GIL holders only (torch calls hooks, and __call__, with the GIL held); what a thread
 * has open lives in thread-local storage, freed by a pthread key destructor when the thread
 * exits. */
#define PY_SSIZE_T_CLEAN
#include "py_binding.h"
#include "py_hooks.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cprof.h"
#include "op_api.h"

/* ---- per-thread state: the module calls whose range is open, and scratch buffers ---- */

typedef struct {
    PyObject *module;  /* strong reference: identity must not be reused while it is open */
    uint64_t gen;      /* the hooks generation that pushed it (see HooksObject.gen) */
    uint32_t name_id;
    uint32_t depth;    /* event-store depth right after its range was pushed */
} open_call;

/* A fragment this thread interned lately: its hash, length and name id. The bytes are
 * compared with the interned name's (names are never removed), so a hit is exact. */
#define FRAG_CACHE 64u
typedef struct {
    uint64_t hash;
    uint32_t len, id;
} frag_slot;

typedef struct {
    open_call *calls;
    uint32_t n, cap;
    cprof_buf dims, types; /* the JSON fragment being built */
    frag_slot frags[FRAG_CACHE];
} hooks_tls;

static _Thread_local hooks_tls *tls_state;
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static int tls_key_ok;

/* Runs at thread exit without the GIL: frees memory only. An entry still open there (a thread
 * cannot exit inside a forward, so only after a BaseException skipped post) leaks its module
 * reference, which cannot be dropped without the GIL. */
static void tls_free(void *p) {
    hooks_tls *s = p;
    free(s->calls);
    cprof_buf_free(&s->dims);
    cprof_buf_free(&s->types);
    free(s);
}

static void tls_make_key(void) { tls_key_ok = pthread_key_create(&tls_key, tls_free) == 0; }

static hooks_tls *tls_get(void) {
    hooks_tls *s = tls_state;
    if (CPROF_LIKELY(s != NULL)) return s;
    pthread_once(&tls_once, tls_make_key);
    s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (tls_key_ok) pthread_setspecific(tls_key, s);
    tls_state = s;
    return s;
}

static int tls_reserve(hooks_tls *s) {
    if (CPROF_LIKELY(s->n < s->cap)) return 0;
    uint32_t ncap = s->cap ? s->cap * 2 : 32;
    open_call *nc = realloc(s->calls, ncap * sizeof *nc);
    if (!nc) return -1;
    s->calls = nc;
    s->cap = ncap;
    return 0;
}

/* ---- the type ---- */

typedef struct {
    PyObject *key;      /* strong reference; NULL = empty slot */
    uint32_t parent_id; /* the name of the module it was called inside (0: none) */
    uint32_t name_id;
} cache_slot;

typedef struct {
    PyObject_HEAD
    PyObject *tensor_type;  /* instances are recorded as tensors */
    PyObject *resolver;     /* resolver(module, parent, parent_name) -> str, or None */
    PyObject *eval_frame;   /* torch._C._dynamo.eval_frame.set_eval_frame, or None */
    PyObject *dtype_names;  /* dict dtype -> str given by the caller, or None */
    PyObject *dtype_json;   /* dict dtype -> bytes: the escaped JSON string, filled on demand */
    PyObject *s_shape, *s_dtype;
    PyObject *fast_capsule; /* cprof._torch_ops' shape reader (op_api.h), or None */
    const cprof_shapes_api *fast;
    int record_shapes;
    /* Bumped by clear(): entries of an older generation belong to hooks that were removed and
     * are closed, not matched, when their thread next calls a hook. */
    uint64_t gen;
    uint64_t errors;        /* failures swallowed so that a hook never breaks a forward */
    uint32_t full_id;       /* name used when the name table is full */
    cache_slot *slots;      /* module -> name id, open addressing, GIL-protected */
    size_t cap, n, marks; /* marks: CHILD_MARK entries among the n */
} HooksObject;

static uint64_t next_gen = 1; /* GIL-protected */

static const char full_marker[] = "[cprof: name table full]";

static size_t slot_of(const void *p, uint32_t parent, size_t mask) {
    uint64_t x = ((uint64_t)(uintptr_t)p >> 4) ^ ((uint64_t)parent << 40);
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 32) & mask;
}

/* A module's name depends on where it is called: its qualified path under the module whose
 * forward calls it (parent: that module's name id), its class called on its own. */
static int cache_get(HooksObject *self, PyObject *m, uint32_t parent, uint32_t *id) {
    if (!self->cap) return 0;
    size_t mask = self->cap - 1;
    for (size_t i = slot_of(m, parent, mask); self->slots[i].key; i = (i + 1) & mask) {
        if (self->slots[i].key == m && self->slots[i].parent_id == parent) {
            *id = self->slots[i].name_id;
            return 1;
        }
    }
    return 0;
}

static int cache_put(HooksObject *self, PyObject *m, uint32_t parent, uint32_t id) {
    if ((self->n + 1) * 2 > self->cap) {
        size_t ncap = self->cap ? self->cap * 2 : 256;
        cache_slot *ns = calloc(ncap, sizeof *ns);
        if (!ns) return -1;
        for (size_t k = 0; k < self->cap; k++) {
            if (!self->slots[k].key) continue;
            size_t i = slot_of(self->slots[k].key, self->slots[k].parent_id, ncap - 1);
            while (ns[i].key) i = (i + 1) & (ncap - 1);
            ns[i] = self->slots[k];
        }
        free(self->slots);
        self->slots = ns;
        self->cap = ncap;
    }
    size_t mask = self->cap - 1, i = slot_of(m, parent, mask);
    while (self->slots[i].key) i = (i + 1) & mask;
    self->slots[i].key = Py_NewRef(m);
    self->slots[i].parent_id = parent;
    self->slots[i].name_id = id;
    self->n++;
    self->marks += parent == UINT32_MAX; /* CHILD_MARK (defined below) */
    return 0;
}

static void cache_clear(HooksObject *self) {
    cache_slot *slots = self->slots;
    size_t cap = self->cap;
    self->slots = NULL;
    self->cap = self->n = self->marks = 0;
    /* released after the table is detached: a module's finaliser may call a hook */
    for (size_t k = 0; k < cap; k++) Py_XDECREF(slots[k].key);
    free(slots);
}

/* Closes an open call: its range is popped only when it is still this thread's innermost one
 * (a range pushed inside and never popped, or a pop too many, leaves the store as it is). */
static void close_call(open_call c) {
    if (cprof_events_depth() == c.depth) cprof_events_pop();
    Py_DECREF(c.module);
}

/* Closes the entries of removed hooks on top of this thread's stack. */
static void drop_stale(HooksObject *self, hooks_tls *s) {
    while (s->n && s->calls[s->n - 1].gen != self->gen) close_call(s->calls[--s->n]);
}

static uint32_t intern_str(HooksObject *self, PyObject *name) {
    Py_ssize_t len;
    PyObject *bytes = NULL;
    const char *p = PyUnicode_AsUTF8AndSize(name, &len);
    if (!p) {
        /* lone surrogates: kept as bytes, the writer turns them into U+FFFD */
        PyErr_Clear();
        bytes = PyUnicode_AsEncodedString(name, "utf-8", "surrogatepass");
        if (!bytes) {
            PyErr_Clear();
            self->errors++;
            return self->full_id;
        }
        p = PyBytes_AS_STRING(bytes);
        len = PyBytes_GET_SIZE(bytes);
    }
    uint32_t id;
    int rc = cprof_names_intern(p, (size_t)len, &id);
    Py_XDECREF(bytes);
    if (rc) {
        self->errors++;
        return self->full_id;
    }
    return id;
}

static PyObject *class_name(PyObject *m) {
    PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(m), "__name__");
    if (name && PyUnicode_Check(name)) return name;
    Py_XDECREF(name);
    PyErr_Clear();
    return PyUnicode_FromString(Py_TYPE(m)->tp_name);
}

/* The name id of module m called inside the innermost open module of this thread (or on its
 * own): the cache, else the resolver. An Exception from the resolver is swallowed (counted;
 * the class names the module); anything else (KeyboardInterrupt) stays set and
 * CPROF_NAME_INVALID is returned, so the hook raises it before pushing anything. */
/* The cache key of "m has been named under a parent": for such a module, a call with no
 * module open asks the resolver every time (a layer recomputed by activation checkpointing in
 * backward keeps its path; a forward call on its own is named by its class). */
#define CHILD_MARK UINT32_MAX

/* Calls the resolver the way torch._dynamo.disable calls a function, without its Python
 * wrapper (which the with_stack tracer would record as user frames, and which runs more
 * Python): dynamo's frame callback is off on this thread while the resolver runs, so a module
 * first named inside a compiled call does not get the resolver compiled as a frame. The
 * callback is put back also when the resolver raised (a failing put-back is counted). New
 * reference, or NULL with an exception set. */
static PyObject *call_resolver(HooksObject *self, PyObject *resolver, PyObject *const *argv) {
    if (!self->eval_frame || self->eval_frame == Py_None)
        return PyObject_Vectorcall(resolver, argv, 3, NULL);
    PyObject *setter = Py_NewRef(self->eval_frame); /* eval_frame may be replaced meanwhile */
    PyObject *prior = PyObject_CallOneArg(setter, Py_None);
    PyObject *name = NULL;
    if (prior) {
        name = PyObject_Vectorcall(resolver, argv, 3, NULL);
        SAVE_EXC(exc);
        PyObject *back = PyObject_CallOneArg(setter, prior);
        if (back) {
            Py_DECREF(back);
        } else {
            PyErr_Clear();
            self->errors++;
        }
        RESTORE_EXC(exc);
        Py_DECREF(prior);
    }
    Py_DECREF(setter);
    return name;
}

static uint32_t name_of(HooksObject *self, hooks_tls *s, PyObject *m) {
    uint32_t id;
    int in_parent = s->n && s->calls[s->n - 1].gen == self->gen;
    uint32_t parent_id = in_parent ? s->calls[s->n - 1].name_id : 0;
    int ask = !in_parent && cache_get(self, m, CHILD_MARK, &id);
    if (CPROF_LIKELY(!ask && cache_get(self, m, parent_id, &id))) return id;
    /* a module calling itself (recursion) keeps the name it is open under: not a new, longer
     * one per depth */
    for (size_t k = s->n; k-- > 0;)
        if (s->calls[k].gen == self->gen && s->calls[k].module == m) {
            id = s->calls[k].name_id;
            if (cache_put(self, m, parent_id, id) < 0) self->errors++;
            return id;
        }
    PyObject *name = NULL;
    if (self->resolver && self->resolver != Py_None) {
        PyObject *parent = Py_None, *parent_name = NULL;
        if (in_parent) {
            size_t len;
            const char *p = cprof_names_get(s->calls[s->n - 1].name_id, &len);
            parent = s->calls[s->n - 1].module;
            parent_name = PyUnicode_DecodeUTF8(p, (Py_ssize_t)len, "surrogatepass");
            if (!parent_name) PyErr_Clear();
        }
        if (!parent_name) parent_name = Py_NewRef(Py_None);
        /* held for the call: the resolver may replace itself, or close the parent's entry */
        PyObject *resolver = Py_NewRef(self->resolver);
        Py_INCREF(parent);
        PyObject *argv[3] = {m, parent, parent_name};
        name = call_resolver(self, resolver, argv);
        Py_DECREF(resolver);
        Py_DECREF(parent);
        Py_DECREF(parent_name);
        if (!name && !PyErr_ExceptionMatches(PyExc_Exception)) return CPROF_NAME_INVALID;
        if (!name || !PyUnicode_Check(name)) {
            PyErr_Clear();
            Py_CLEAR(name);
            self->errors++;
        }
    }
    if (!name && !(name = class_name(m))) {
        PyErr_Clear();
        self->errors++;
        return self->full_id;
    }
    id = intern_str(self, name);
    Py_DECREF(name);
    if (ask) return id; /* answered per call, not cached */
    /* the resolver ran Python code: another thread may have named m meanwhile */
    uint32_t first;
    if (cache_get(self, m, parent_id, &first)) return first;
    if (cache_put(self, m, parent_id, id) < 0) self->errors++;
    if (in_parent && !cache_get(self, m, CHILD_MARK, &first) &&
        cache_put(self, m, CHILD_MARK, id) < 0)
        self->errors++;
    return id;
}

/* ---- record_shapes: torch.profiler's "Input Dims" / "Input type" for a call's arguments ---- */

static int is_tensor(HooksObject *self, PyObject *o) {
    return PyObject_TypeCheck(o, (PyTypeObject *)self->tensor_type);
}

static int is_number(PyObject *o) {
    return PyLong_Check(o) || PyFloat_Check(o) || PyComplex_Check(o); /* bool is a PyLong */
}

static void put_dims(HooksObject *self, cprof_buf *b, PyObject *t) {
    /* torch.Size is a tuple subclass: one attribute read, no call, no list */
    PyObject *shape = PyObject_GetAttr(t, self->s_shape);
    cprof_buf_putc(b, '[');
    if (shape && PyTuple_Check(shape)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(shape); i++) {
            long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
            if (v == -1 && PyErr_Occurred()) PyErr_Clear(); /* a symbolic size: -1 */
            if (i) cprof_buf_putc(b, ',');
            cprof_buf_i64(b, v);
        }
    } else if (!shape) {
        PyErr_Clear();
    }
    Py_XDECREF(shape);
    cprof_buf_putc(b, ']');
}

/* dtype -> its JSON string literal, as torch writes it ("float", "c10::Half"): the caller's
 * table, else str(dtype) without "torch.". Made once per dtype, then a dict lookup. */
static PyObject *dtype_literal(HooksObject *self, PyObject *dt) {
    PyObject *lit = PyDict_GetItemWithError(self->dtype_json, dt);
    if (lit || PyErr_Occurred()) return lit;
    PyObject *name = NULL;
    if (self->dtype_names != Py_None) {
        name = PyDict_GetItemWithError(self->dtype_names, dt);
        Py_XINCREF(name);
    }
    if (!name && !PyErr_Occurred()) {
        PyObject *full = PyObject_Str(dt);
        if (full) {
            Py_ssize_t n = PyUnicode_GET_LENGTH(full);
            Py_ssize_t at = PyUnicode_FindChar(full, '.', 0, n, -1);
            name = at >= 0 ? PyUnicode_Substring(full, at + 1, n) : Py_NewRef(full);
            Py_DECREF(full);
        }
    }
    if (!name || !PyUnicode_Check(name)) {
        Py_XDECREF(name);
        return NULL;
    }
    Py_ssize_t len;
    const char *p = PyUnicode_AsUTF8AndSize(name, &len);
    if (p) {
        cprof_buf esc;
        cprof_buf_init(&esc);
        cprof_buf_json_str(&esc, p, (size_t)len);
        if (!esc.oom) lit = PyBytes_FromStringAndSize(esc.data, (Py_ssize_t)esc.len);
        cprof_buf_free(&esc);
    }
    Py_DECREF(name);
    if (!lit) return NULL;
    int rc = PyDict_SetItem(self->dtype_json, dt, lit);
    Py_DECREF(lit); /* the dict holds it */
    return rc < 0 ? NULL : lit;
}

static void put_dtype(HooksObject *self, cprof_buf *b, PyObject *t) {
    PyObject *dt = PyObject_GetAttr(t, self->s_dtype);
    PyObject *lit = dt ? dtype_literal(self, dt) : NULL;
    if (lit) {
        cprof_buf_put(b, PyBytes_AS_STRING(lit), (size_t)PyBytes_GET_SIZE(lit));
    } else {
        PyErr_Clear();
        cprof_buf_put(b, "\"\"", 2);
    }
    Py_XDECREF(dt);
}

/* One argument, as torch encodes an op input: a tensor (its shape, its dtype), a list or
 * tuple holding tensors ("TensorList", each element's shape one level deep), of numbers only
 * ("ScalarList"), a number ("Scalar"), anything else ([] and ""). */
static void put_arg(HooksObject *self, hooks_tls *s, PyObject *a) {
    if (is_tensor(self, a)) {
        put_dims(self, &s->dims, a);
        put_dtype(self, &s->types, a);
        return;
    }
    if (is_number(a)) {
        cprof_buf_puts(&s->dims, "[]");
        cprof_buf_puts(&s->types, "\"Scalar\"");
        return;
    }
    if (PyList_Check(a) || PyTuple_Check(a)) {
        Py_ssize_t tensors = 0, numbers = 0, n = PySequence_Fast_GET_SIZE(a);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(a, i);
            if (is_tensor(self, item)) tensors++;
            else if (is_number(item)) numbers++;
        }
        if (tensors) {
            cprof_buf_putc(&s->dims, '[');
            /* reading a shape may run Python code (a tensor subclass) that changes a list */
            for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(a); i++) {
                PyObject *item = Py_NewRef(PySequence_Fast_GET_ITEM(a, i));
                if (i) cprof_buf_putc(&s->dims, ',');
                if (is_tensor(self, item)) put_dims(self, &s->dims, item);
                else cprof_buf_put(&s->dims, "[]", 2);
                Py_DECREF(item);
            }
            cprof_buf_putc(&s->dims, ']');
            cprof_buf_puts(&s->types, "\"TensorList\"");
        } else {
            cprof_buf_puts(&s->dims, "[]");
            cprof_buf_puts(&s->types, numbers == n ? "\"ScalarList\"" : "\"\"");
        }
        return;
    }
    cprof_buf_puts(&s->dims, "[]");
    cprof_buf_puts(&s->types, "\"\"");
}

/* A word-at-a-time hash of a fragment, for the per-thread cache in front of the name table
 * (whose own interning takes its lock and hashes byte by byte). */
static uint64_t frag_hash(const char *p, size_t len) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, p + i, len - i);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 29);
}

/* The name id of the fragment p (len bytes): from this thread's cache, else interned (and
 * cached). -1: the name table failed (full, no memory). */
static int frag_intern(hooks_tls *s, const char *p, size_t len, uint32_t *id) {
    uint64_t h = frag_hash(p, len);
    frag_slot *slot = &s->frags[h & (FRAG_CACHE - 1)];
    if (slot->hash == h && slot->len == len && slot->id) {
        size_t n;
        const char *q = cprof_names_get(slot->id, &n);
        if (n == len && memcmp(p, q, len) == 0) {
            *id = slot->id;
            return 0;
        }
    }
    if (len > UINT32_MAX || cprof_names_intern(p, len, id)) return -1;
    *slot = (frag_slot){h, (uint32_t)len, *id};
    return 0;
}

/* Builds `"Input Dims":[...],"Input type":[...]` for the n positional arguments args into
 * s->dims and interns it. Returns the fragment's id, or 0 (nothing to add; an error is counted).
 * Never raises. */
static uint32_t fragment_id(HooksObject *self, hooks_tls *s, PyObject *const *args,
                            Py_ssize_t n) {
    if (self->fast) { /* torch's C++ tensors read directly, the same text (decision 94) */
        uint32_t id = 0;
        if (self->fast->args_fragment(args, n, &id)) {
            if (!id) self->errors++;
            return id;
        }
    }
    s->dims.len = s->types.len = 0;
    cprof_buf_puts(&s->dims, "\"Input Dims\":[");
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i) {
            cprof_buf_putc(&s->dims, ',');
            cprof_buf_putc(&s->types, ',');
        }
        put_arg(self, s, args[i]);
    }
    cprof_buf_puts(&s->dims, "],\"Input type\":[");
    cprof_buf_put(&s->dims, s->types.data, s->types.len);
    cprof_buf_putc(&s->dims, ']');
    uint32_t id = 0;
    if (s->dims.oom || s->types.oom || frag_intern(s, s->dims.data, s->dims.len, &id) < 0) {
        /* a failed allocation is sticky in a buffer: start the next one afresh */
        cprof_buf_free(&s->dims);
        cprof_buf_free(&s->types);
        self->errors++;
        return 0;
    }
    return id;
}

/* ---- opening and closing a module's range (both captures) ---- */

/* Opens module m's range on this thread: its name, the shapes of its n positional arguments
 * (record_shapes, window open, args not NULL), the push. Returns 1 (pushed; *mark: its index on
 * this thread's stack, for close_module), 0 (nothing pushed: a failure, counted) or -1 (the
 * resolver raised something that is not an Exception, which stays set; nothing pushed). */
static int open_module(HooksObject *self, PyObject *m, PyObject *const *args, Py_ssize_t n,
                       uint32_t *mark) {
    hooks_tls *s = tls_get();
    if (CPROF_UNLIKELY(!s)) {
        self->errors++;
        return 0;
    }
    drop_stale(self, s);
    uint32_t name_id = name_of(self, s, m);
    if (CPROF_UNLIKELY(name_id == CPROF_NAME_INVALID)) return -1;
    /* shapes are read before the push, so the range does not include reading them */
    uint32_t frag = 0;
    if (self->record_shapes && args && cprof_events_cpu_on()) frag = fragment_id(self, s, args, n);
    if (CPROF_UNLIKELY(tls_reserve(s) < 0) ||
        CPROF_UNLIKELY(cprof_events_push(name_id, CPROF_CAT_USER_ANNOTATION) != CPROF_OK)) {
        self->errors++;
        return 0;
    }
    if (frag) cprof_events_set_raw_args(frag);
    cprof_events_mark(CPROF_REC_MODULE);
    *mark = s->n;
    s->calls[s->n++] = (open_call){Py_NewRef(m), self->gen, name_id, cprof_events_depth()};
    return 1;
}

/* Closes the range open_module pushed at mark for m, and those left open above it. Nothing
 * when that entry is gone already: clear() closed it (the capture was removed mid-call). */
static void close_module(HooksObject *self, PyObject *m, uint32_t mark) {
    hooks_tls *s = tls_state;
    if (!s) return;
    drop_stale(self, s);
    if (s->n > mark && s->calls[mark].module == m && s->calls[mark].gen == self->gen)
        while (s->n > mark) close_call(s->calls[--s->n]);
}

/* ---- methods ---- */

/* pre(module, args): torch's global forward pre-hook. Opens the module's range. */
static PyObject *hooks_pre(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (CPROF_UNLIKELY(nargs < 1)) {
        PyErr_SetString(PyExc_TypeError, "pre(module, args) takes the module and its args");
        return NULL;
    }
    PyObject *call_args = nargs >= 2 && PyTuple_Check(args[1]) ? args[1] : NULL;
    uint32_t mark;
    if (open_module(self, args[0], call_args ? &PyTuple_GET_ITEM(call_args, 0) : NULL,
                    call_args ? PyTuple_GET_SIZE(call_args) : 0, &mark) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* post(module, args, output) (or with kwargs before output): torch's global forward hook,
 * registered with always_call=True so it also runs when forward raises. Closes the range that
 * this module's pre pushed on this thread, and calls above it whose post never came (a
 * BaseException skips always_call hooks); a module whose pre did not push is ignored. */
static PyObject *hooks_post(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (CPROF_UNLIKELY(nargs < 1)) {
        PyErr_SetString(PyExc_TypeError, "post(module, args, output) takes the module first");
        return NULL;
    }
    hooks_tls *s = tls_state;
    if (!s || !s->n) Py_RETURN_NONE;
    drop_stale(self, s);
    uint32_t i = s->n;
    while (i > 0 && (s->calls[i - 1].module != args[0] || s->calls[i - 1].gen != self->gen)) i--;
    if (i > 0) close_module(self, args[0], i - 1);
    Py_RETURN_NONE;
}

/* clear(): forgets every name (dropping the module references) and closes the ranges this
 * thread still has open through these hooks; other threads close theirs on their next hook. */
static PyObject *hooks_clear(HooksObject *self, PyObject *unused) {
    (void)unused;
    self->gen = next_gen++;
    hooks_tls *s = tls_state;
    if (s) drop_stale(self, s);
    cache_clear(self);
    PyDict_Clear(self->dtype_json);
    Py_RETURN_NONE;
}

/* record_args(args): the shapes fragment of args on this thread's innermost open range. */
static PyObject *hooks_record_args(HooksObject *self, PyObject *args) {
    if (!PyTuple_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "record_args(args) takes a tuple");
        return NULL;
    }
    hooks_tls *s = tls_get();
    if (!s) return PyErr_NoMemory();
    if (!cprof_events_cpu_on()) Py_RETURN_NONE;
    uint32_t frag = fragment_id(self, s, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args));
    if (frag) cprof_events_set_raw_args(frag);
    Py_RETURN_NONE;
}

/* fast_shapes_on() -> bool: tensors are read through cprof._torch_ops (decision 94). */
static PyObject *hooks_fast_shapes_on(HooksObject *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(self->fast != NULL);
}

/* shapes_json(args) -> str: the fragment record_shapes would attach, for tests and tools. */
static PyObject *hooks_shapes_json(HooksObject *self, PyObject *args) {
    if (!PyTuple_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "shapes_json(args) takes a tuple");
        return NULL;
    }
    hooks_tls *s = tls_get();
    if (!s) return PyErr_NoMemory();
    uint32_t frag = fragment_id(self, s, &PyTuple_GET_ITEM(args, 0), PyTuple_GET_SIZE(args));
    if (!frag) return PyErr_NoMemory();
    size_t len;
    const char *p = cprof_names_get(frag, &len);
    return PyUnicode_DecodeUTF8(p, (Py_ssize_t)len, "replace");
}

static PyObject *hooks_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"tensor_type", "record_shapes", "resolver", "dtype_names",
                             "fast_shapes", NULL};
    PyObject *tensor_type, *resolver = Py_None, *dtype_names = Py_None, *fast = Py_None;
    int record_shapes = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|pOOO:ModuleHooks", kwlist, &tensor_type,
                                     &record_shapes, &resolver, &dtype_names, &fast))
        return NULL;
    const cprof_shapes_api *fast_api = NULL;
    if (fast != Py_None) {
        if (!PyCapsule_IsValid(fast, CPROF_SHAPES_API_CAPSULE)) {
            PyErr_SetString(PyExc_TypeError, "ModuleHooks: fast_shapes must be the capsule "
                                             "cprof._torch_ops.shapes_api() returns, or None");
            return NULL;
        }
        fast_api = PyCapsule_GetPointer(fast, CPROF_SHAPES_API_CAPSULE);
        if (fast_api->version != CPROF_SHAPES_API_VERSION ||
            fast_api->size < sizeof(cprof_shapes_api)) {
            PyErr_SetString(PyExc_ValueError, "ModuleHooks: fast_shapes comes from another "
                                              "build of cprof._torch_ops: rebuild cprof");
            return NULL;
        }
    }
    if (!PyType_Check(tensor_type)) {
        PyErr_SetString(PyExc_TypeError, "ModuleHooks: tensor_type must be a type (torch.Tensor)");
        return NULL;
    }
    if (resolver != Py_None && !PyCallable_Check(resolver)) {
        PyErr_SetString(PyExc_TypeError, "ModuleHooks: resolver must be callable or None");
        return NULL;
    }
    if (dtype_names != Py_None && !PyDict_Check(dtype_names)) {
        PyErr_SetString(PyExc_TypeError, "ModuleHooks: dtype_names must be a dict or None");
        return NULL;
    }
    uint32_t full_id;
    if (cprof_names_intern(full_marker, sizeof full_marker - 1, &full_id)) return PyErr_NoMemory();
    HooksObject *self = (HooksObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->tensor_type = Py_NewRef(tensor_type);
    self->resolver = Py_NewRef(resolver);
    self->eval_frame = Py_NewRef(Py_None);
    self->dtype_names = Py_NewRef(dtype_names);
    self->fast_capsule = Py_NewRef(fast);
    self->fast = fast_api;
    self->dtype_json = PyDict_New();
    self->s_shape = PyUnicode_InternFromString("shape");
    self->s_dtype = PyUnicode_InternFromString("dtype");
    self->record_shapes = record_shapes;
    self->gen = next_gen++;
    self->full_id = full_id;
    if (!self->dtype_json || !self->s_shape || !self->s_dtype) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int hooks_traverse(HooksObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->tensor_type);
    Py_VISIT(self->fast_capsule);
    Py_VISIT(self->resolver);
    Py_VISIT(self->eval_frame);
    Py_VISIT(self->dtype_names);
    Py_VISIT(self->dtype_json);
    for (size_t k = 0; k < self->cap; k++) Py_VISIT(self->slots[k].key);
    return 0;
}

static int hooks_tp_clear(HooksObject *self) {
    cache_clear(self);
    Py_CLEAR(self->tensor_type);
    Py_CLEAR(self->fast_capsule);
    self->fast = NULL;
    Py_CLEAR(self->resolver);
    Py_CLEAR(self->eval_frame);
    Py_CLEAR(self->dtype_names);
    Py_CLEAR(self->dtype_json);
    return 0;
}

static void hooks_dealloc(HooksObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    hooks_tp_clear(self);
    Py_CLEAR(self->s_shape);
    Py_CLEAR(self->s_dtype);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *hooks_get_errors(HooksObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(self->errors);
}

static PyObject *hooks_get_cached(HooksObject *self, void *c) {
    (void)c;
    return PyLong_FromSize_t(self->n - self->marks); /* names cached, per module and place */
}

static PyObject *hooks_get_record_shapes(HooksObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(self->record_shapes);
}

static PyObject *hooks_get_resolver(HooksObject *self, void *c) {
    (void)c;
    return Py_NewRef(self->resolver ? self->resolver : Py_None);
}

/* Settable (tests give one of their own; cprof/_modules.py sets it at install). */
static int hooks_set_resolver(HooksObject *self, PyObject *v, void *c) {
    (void)c;
    if (!v || (v != Py_None && !PyCallable_Check(v))) {
        PyErr_SetString(PyExc_TypeError, "ModuleHooks: resolver must be callable or None");
        return -1;
    }
    Py_SETREF(self->resolver, Py_NewRef(v));
    return 0;
}

static PyObject *hooks_get_eval_frame(HooksObject *self, void *c) {
    (void)c;
    return Py_NewRef(self->eval_frame ? self->eval_frame : Py_None);
}

/* Set by cprof/_modules.py once torch._dynamo is imported (call_resolver). */
static int hooks_set_eval_frame(HooksObject *self, PyObject *v, void *c) {
    (void)c;
    if (!v || (v != Py_None && !PyCallable_Check(v))) {
        PyErr_SetString(PyExc_TypeError, "ModuleHooks: eval_frame must be callable or None");
        return -1;
    }
    Py_SETREF(self->eval_frame, Py_NewRef(v));
    return 0;
}

static PyObject *hooks_get_open(HooksObject *self, void *c) {
    (void)c;
    hooks_tls *s = tls_state;
    uint32_t n = 0;
    for (uint32_t i = 0; s && i < s->n; i++) n += s->calls[i].gen == self->gen;
    return PyLong_FromUnsignedLong(n);
}

static PyMethodDef hooks_methods[] = {
    {"pre", (PyCFunction)(void (*)(void))hooks_pre, METH_FASTCALL,
     "pre(module, args): global forward pre-hook; opens the module's range. Returns None."},
    {"post", (PyCFunction)(void (*)(void))hooks_post, METH_FASTCALL,
     "post(module, args, output): global forward hook (always_call=True); closes the range "
     "pre opened for this module on this thread. Returns None."},
    {"clear", (PyCFunction)hooks_clear, METH_NOARGS,
     "Forgets module names (drops the references) and closes this thread's open ranges."},
    {"record_args", (PyCFunction)hooks_record_args, METH_O,
     "record_args(args): Input Dims / Input type of args on this thread's innermost range."},
    {"fast_shapes_on", (PyCFunction)hooks_fast_shapes_on, METH_NOARGS,
     "fast_shapes_on() -> bool: tensors' shapes are read through cprof._torch_ops."},
    {"shapes_json", (PyCFunction)hooks_shapes_json, METH_O,
     "shapes_json(args) -> str: the args fragment record_shapes writes for args."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hooks_getset[] = {
    {"errors", (getter)hooks_get_errors, NULL, "Failures swallowed by the hooks.", NULL},
    {"cached", (getter)hooks_get_cached, NULL, "Modules named so far.", NULL},
    {"record_shapes", (getter)hooks_get_record_shapes, NULL, "Whether shapes are kept.", NULL},
    {"resolver", (getter)hooks_get_resolver, (setter)hooks_set_resolver,
     "resolver(module, parent, parent_name) -> str, or None (modules named by class).", NULL},
    {"eval_frame", (getter)hooks_get_eval_frame, (setter)hooks_set_eval_frame,
     "torch._C._dynamo.eval_frame.set_eval_frame, or None: when set, dynamo's frame callback "
     "is off (set_eval_frame(None)) while the resolver runs, as torch._dynamo.disable does.",
     NULL},
    {"open", (getter)hooks_get_open, NULL, "Module ranges open on this thread.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot hooks_slots[] = {
    {Py_tp_doc, "ModuleHooks(tensor_type, record_shapes=False, resolver=None, dtype_names=None)"
                "\n\nModule ranges in C. Either pass .pre to register_module_forward_pre_hook and "
                ".post to register_module_forward_hook(always_call=True), or give it to a "
                "ModuleCall that replaces nn.Module.__call__. resolver(module, parent, "
                "parent_name) -> str names a module the first time it is seen (parent: the "
                "innermost module open on this thread, or None)."},
    {Py_tp_new, hooks_new},
    {Py_tp_dealloc, hooks_dealloc},
    {Py_tp_traverse, hooks_traverse},
    {Py_tp_clear, hooks_tp_clear},
    {Py_tp_methods, hooks_methods},
    {Py_tp_getset, hooks_getset},
    {0, NULL},
};

static PyType_Spec hooks_spec = {
    .name = "cprof._C.ModuleHooks",
    .basicsize = sizeof(HooksObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = hooks_slots,
};

/* ---- py_hooks.h: for the Module.__call__ capture ---- */

int cprof_hooks_check(PyObject *o) { return Py_TYPE(o)->tp_dealloc == (destructor)hooks_dealloc; }

int cprof_hooks_enter(PyObject *hooks, PyObject *m, PyObject *const *args, Py_ssize_t n,
                      uint32_t *mark) {
    return open_module((HooksObject *)hooks, m, args, n, mark);
}

void cprof_hooks_exit(PyObject *hooks, PyObject *m, uint32_t mark) {
    close_module((HooksObject *)hooks, m, mark);
}

int cprof_py_hooks_add(PyObject *m) {
    PyObject *type = PyType_FromModuleAndSpec(m, &hooks_spec, NULL);
    if (!type) return -1;
    int rc = PyModule_AddObjectRef(m, "ModuleHooks", type);
    Py_DECREF(type);
    if (rc < 0) return -1;
    return cprof_py_modcall_add(m);
}
