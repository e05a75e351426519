/* Loads a Chrome trace (plain or gzip) and parses it into compact cprof_tev records with
 * interned strings: a hand-written single-pass scanner over the whole text, because a DOM of a
 * 1 GB trace (cJSON, Python's json) costs several times its size and most of the time.
 * Only the fields the analysis and the merger use are decoded; everything else is skipped
 * structurally, and every malformed byte is an error with its position. Any thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "json_scan.h"
#include "trace_read.h"


typedef struct tstr {
    const char *s;
    uint32_t len, hash;
    uint8_t kind; /* 0xff: not computed */
    uint8_t flags;
} tstr;

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    char data[];
} arena_chunk;

struct cprof_trace {
    cprof_tev *ev;
    size_t nev, capev;
    tstr *strs;
    uint32_t nstrs, capstrs;
    uint32_t *table; /* open addressing: string ids, 0 empty */
    uint32_t tmask;
    arena_chunk *arena;
    char *text; /* kept when keep_text */
    size_t text_len;
    int has_events; /* a traceEvents array was read */
    cprof_trace_info info;
    cprof_merged_input *merged; /* cprof.merged: the inputs of a `cprof merge` (info.nmerged) */
    size_t capmerged;
    const cprof_trace *parent;  /* a rank view: everything but ev is the parent's */
};

/* ---- strings ---- */

static uint32_t hash_bytes(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h ? h : 1;
}

static char *arena_copy(cprof_trace *t, const char *s, size_t n) {
    arena_chunk *c = t->arena;
    if (!c || c->cap - c->used < n + 1) {
        size_t cap = n + 1 > (1u << 20) ? n + 1 : (1u << 20);
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = t->arena;
        c->used = 0;
        c->cap = cap;
        t->arena = c;
    }
    char *p = c->data + c->used;
    memcpy(p, s, n);
    p[n] = 0;
    c->used += n + 1;
    return p;
}

static int table_grow(cprof_trace *t) {
    uint32_t cap = t->table ? (t->tmask + 1) * 2 : 4096;
    uint32_t *nt = calloc(cap, sizeof *nt);
    if (!nt) return CPROF_E_NOMEM;
    for (uint32_t id = 1; id < t->nstrs; id++) {
        uint32_t i = t->strs[id].hash & (cap - 1);
        while (nt[i]) i = (i + 1) & (cap - 1);
        nt[i] = id;
    }
    free(t->table);
    t->table = nt;
    t->tmask = cap - 1;
    return CPROF_OK;
}

static int intern(cprof_trace *t, const char *s, size_t n, uint32_t *id) {
    if (n >= UINT32_MAX) return CPROF_E_ARG;
    if ((size_t)t->nstrs * 2 >= (size_t)t->tmask + 1 && table_grow(t)) return CPROF_E_NOMEM;
    uint32_t h = hash_bytes(s, n), i = h & t->tmask;
    for (uint32_t cur; (cur = t->table[i]) != 0; i = (i + 1) & t->tmask) {
        const tstr *e = &t->strs[cur];
        if (e->hash == h && e->len == n && memcmp(e->s, s, n) == 0) {
            *id = cur;
            return CPROF_OK;
        }
    }
    if (t->nstrs == t->capstrs) {
        uint32_t cap = t->capstrs * 2;
        tstr *ns = realloc(t->strs, cap * sizeof *ns);
        if (!ns) return CPROF_E_NOMEM;
        t->strs = ns;
        t->capstrs = cap;
    }
    char *copy = arena_copy(t, s, n);
    if (!copy) return CPROF_E_NOMEM;
    t->strs[t->nstrs] = (tstr){copy, (uint32_t)n, h, 0xff, 0};
    t->table[i] = t->nstrs;
    *id = t->nstrs++;
    return CPROF_OK;
}

/* ---- events ---- */

/* |ts| and dur are bounded so that sums and differences of times never overflow int64 */
#define TIME_LIMIT_NS (INT64_C(1) << 61)

#define KEY(s, n, lit) ((n) == sizeof(lit) - 1 && memcmp((s), (lit), sizeof(lit) - 1) == 0)

static int lower_eq(const char *s, size_t n, const char *lit) {
    size_t m = strlen(lit);
    if (n != m) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != lit[i]) return 0;
    }
    return 1;
}

static uint8_t kind_of(const char *s, size_t n) {
    static const struct {
        const char *cat;
        uint8_t kind;
    } cats[] = {
        {"kernel", CPROF_TK_KERNEL},           {"gpu_memcpy", CPROF_TK_MEMCPY},
        {"memcpy", CPROF_TK_MEMCPY},           {"gpu_memset", CPROF_TK_MEMSET},
        {"memset", CPROF_TK_MEMSET},           {"cuda_runtime", CPROF_TK_RUNTIME},
        {"runtime", CPROF_TK_RUNTIME},         {"cuda_driver", CPROF_TK_DRIVER},
        {"driver", CPROF_TK_DRIVER},           {"cuda_sync", CPROF_TK_SYNC},
        {"cpu_op", CPROF_TK_CPU_OP},           {"operator", CPROF_TK_CPU_OP},
        {"user_annotation", CPROF_TK_USER_ANNOTATION},
        {"python_function", CPROF_TK_PYTHON_FUNCTION},
        {"gpu_user_annotation", CPROF_TK_GPU_USER_ANNOTATION},
        {"ac2g", CPROF_TK_FLOW},               {"fwdbwd", CPROF_TK_FLOW},
    };
    for (size_t i = 0; i < sizeof cats / sizeof cats[0]; i++)
        if (lower_eq(s, n, cats[i].cat)) return cats[i].kind;
    return CPROF_TK_OTHER;
}

/* A pid/tid: a number, or a string interned. */
static int id_value(cprof_js *ps, int64_t *out, cprof_tspan *at, const char *ev0) {
    cprof_js_ws(ps);
    const char *v0 = ps->p;
    if (ps->p < ps->end && *ps->p == 'n') { /* null: absent */
        *out = CPROF_TEV_NONE;
        return cprof_js_literal(ps, "null", 4);
    }
    if (ps->p < ps->end && *ps->p == '"') {
        const char *s;
        size_t n;
        uint32_t id;
        if (cprof_js_str(ps, &s, &n)) return CPROF_E_FORMAT;
        int rc = intern(((cprof_trace *)ps->user), s, n, &id);
        if (rc) return rc;
        *out = CPROF_TEV_STR(id);
    } else {
        if (cprof_js_int(ps, out)) return CPROF_E_FORMAT;
    }
    if (at) *at = (cprof_tspan){(uint32_t)(v0 - ev0), (uint32_t)(ps->p - v0)};
    return CPROF_OK;
}

static int int_value(cprof_js *ps, int64_t *out) {
    cprof_js_ws(ps);
    if (ps->p < ps->end && (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))) {
        return cprof_js_int(ps, out) ? CPROF_E_FORMAT : CPROF_OK;
    }
    return cprof_js_skip(ps, 1); /* a string or null where a number was expected: ignored */
}

static int args_object(cprof_js *ps, cprof_tev *e) {
    cprof_js_ws(ps);
    if (ps->p >= ps->end || *ps->p != '{') return cprof_js_skip(ps, 1);
    if (!cprof_js_open(ps, '}')) return CPROF_OK;
    for (;;) {
        const char *k;
        size_t kn;
        int rc;
        if (cprof_js_str(ps, &k, &kn) || cprof_js_expect(ps, ':', "expected ':' after a key")) return CPROF_E_FORMAT;
        int64_t v;
        if (KEY(k, kn, "correlation")) {
            rc = int_value(ps, &e->correlation);
        } else if (KEY(k, kn, "External id")) {
            rc = int_value(ps, &e->external_id);
        } else if (KEY(k, kn, "bytes")) {
            rc = int_value(ps, &e->bytes);
        } else if (KEY(k, kn, "malloc in use bytes") || KEY(k, kn, "allocated bytes") ||
                   KEY(k, kn, "Total Allocated") ||
                   (KEY(k, kn, "resident bytes") && e->bytes == CPROF_TEV_NONE)) {
            /* memory counters (cprof's CPU / GPU memory tracks, torch's [memory] events):
             * their value, for trace_memory.c; malloc'd bytes win over the resident set */
            rc = int_value(ps, &e->bytes);
        } else if (KEY(k, kn, "Device Id")) { /* torch's [memory] events */
            v = -1;
            rc = int_value(ps, &v);
            e->device = (int32_t)v;
        } else if (KEY(k, kn, "Device Type")) { /* 0 CPU, 1 CUDA: kept in stream */
            v = -1;
            rc = int_value(ps, &v);
            e->stream = (int32_t)v;
        } else if (KEY(k, kn, "device")) {
            v = -1;
            rc = int_value(ps, &v);
            e->device = (int32_t)v;
        } else if (KEY(k, kn, "stream")) {
            v = -1;
            rc = int_value(ps, &v);
            e->stream = (int32_t)v;
        } else if (KEY(k, kn, "est. achieved occupancy %")) {
            /* Kineto's (an integer; negative when it could not compute it) */
            double d;
            int64_t milli;
            int exact, is_int;
            cprof_js_ws(ps);
            if (ps->p < ps->end && (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))) {
                rc = cprof_js_num(ps, &d, &milli, &exact, &is_int) ? CPROF_E_FORMAT : CPROF_OK;
                if (!rc && d >= 0 && d <= 100) e->occupancy = (uint8_t)(d + 0.5);
            } else {
                rc = cprof_js_skip(ps, 1);
            }
        } else if (KEY(k, kn, "sort_index")) {
            v = -1;
            rc = int_value(ps, &v);
            e->sort_index = (int32_t)v;
        } else if ((KEY(k, kn, "name") || KEY(k, kn, "labels")) && e->ph == 'M') {
            cprof_js_ws(ps);
            if (ps->p < ps->end && *ps->p == '"') {
                const char *s;
                size_t n;
                rc = cprof_js_str(ps, &s, &n);
                if (!rc) rc = intern(((cprof_trace *)ps->user), s, n, &e->arg_name);
            } else {
                rc = cprof_js_skip(ps, 1);
            }
        } else {
            rc = cprof_js_skip(ps, 1);
        }
        if (rc) return rc;
        int more = cprof_js_next(ps, '}', "reading an event's args");
        if (more <= 0) return more;
    }
}

static int event(cprof_js *ps, cprof_trace *t) {
    cprof_js_ws(ps);
    const char *ev0 = ps->p;
    if (ps->p >= ps->end) return cprof_js_fail(ps, ps->end, "reading traceEvents");
    if (*ps->p != '{') return cprof_js_fail(ps, ps->p, "an element of traceEvents is not an object");
    if (t->nev == t->capev) {
        size_t cap = t->capev ? t->capev * 2 : 65536;
        cprof_tev *ne = realloc(t->ev, cap * sizeof *ne);
        if (!ne) return CPROF_E_NOMEM;
        t->ev = ne;
        t->capev = cap;
    }
    cprof_tev *e = &t->ev[t->nev];
    memset(e, 0, sizeof *e);
    e->dur_ns = -1;
    e->pid = e->tid = e->correlation = e->external_id = e->bytes = e->flow_id = CPROF_TEV_NONE;
    e->device = e->stream = e->sort_index = -1;
    e->occupancy = CPROF_TEV_NO_OCC;
    e->raw_off = (uint64_t)(ev0 - ps->base);
    int have_ts = 0, have_name = 0, neg_dur = 0;
    if (cprof_js_open(ps, '}')) {
        for (;;) {
            const char *k;
            size_t kn;
            int rc = CPROF_OK;
            if (cprof_js_str(ps, &k, &kn) || cprof_js_expect(ps, ':', "expected ':' after a key"))
                return CPROF_E_FORMAT;
            cprof_js_ws(ps);
            const char *v0 = ps->p;
            if (KEY(k, kn, "ph")) {
                const char *s;
                size_t n;
                if (ps->p < ps->end && *ps->p == '"') {
                    rc = cprof_js_str(ps, &s, &n);
                    if (!rc) e->ph = n ? (uint8_t)s[0] : 0;
                } else {
                    rc = cprof_js_skip(ps, 1);
                }
            } else if (KEY(k, kn, "name") || KEY(k, kn, "cat")) {
                uint32_t *dst = k[0] == 'n' ? &e->name : &e->cat;
                if (ps->p < ps->end && *ps->p == '"') {
                    const char *s;
                    size_t n;
                    rc = cprof_js_str(ps, &s, &n);
                    if (!rc) rc = intern(t, s, n, dst);
                    have_name |= k[0] == 'n';
                } else {
                    rc = cprof_js_skip(ps, 1);
                }
            } else if (KEY(k, kn, "ts") || KEY(k, kn, "dur")) {
                double d;
                int64_t m;
                int ex, ii;
                if (ps->p < ps->end && *ps->p == '"') {
                    rc = cprof_js_fail(ps, ps->p, "\"ts\"/\"dur\" must be numbers");
                } else {
                    rc = cprof_js_num(ps, &d, &m, &ex, &ii);
                    if (!rc && (m > TIME_LIMIT_NS || m < -TIME_LIMIT_NS))
                        rc = cprof_js_fail(ps, v0, "a \"ts\" or \"dur\" beyond +-2^61 ns "
                                                   "(73 years): the trace is corrupt");
                    if (!rc) {
                        if (k[0] == 't') {
                            e->ts_ns = m;
                            e->ts_at = (cprof_tspan){(uint32_t)(v0 - ev0), (uint32_t)(ps->p - v0)};
                            have_ts = 1;
                        } else {
                            e->dur_ns = m < 0 ? -1 : m;
                            neg_dur = m < 0;
                        }
                    }
                }
            } else if (KEY(k, kn, "pid")) {
                rc = id_value(ps, &e->pid, &e->pid_at, ev0);
            } else if (KEY(k, kn, "tid")) {
                rc = id_value(ps, &e->tid, NULL, ev0);
            } else if (KEY(k, kn, "id")) {
                if (ps->p < ps->end && *ps->p != '"' && *ps->p != '{') {
                    rc = int_value(ps, &e->flow_id);
                    e->id_at = (cprof_tspan){(uint32_t)(v0 - ev0), (uint32_t)(ps->p - v0)};
                } else {
                    rc = cprof_js_skip(ps, 1);
                }
            } else if (KEY(k, kn, "args")) {
                rc = args_object(ps, e);
            } else {
                rc = cprof_js_skip(ps, 1);
            }
            if (rc) return rc;
            int more = cprof_js_next(ps, '}', "reading an event");
            if (more < 0) return more;
            if (!more) break;
        }
    }
    if (e->ph && strchr("XBEiIC", e->ph)) { /* what the analysis would have to guess */
        int x = e->ph == 'X';
        e->skip = !have_ts               ? CPROF_TSKIP_NO_TS
                  : x && neg_dur         ? CPROF_TSKIP_NEG_DUR
                  : x && e->dur_ns < 0   ? CPROF_TSKIP_NO_DUR
                  : x && !have_name      ? CPROF_TSKIP_BAD_NAME
                                         : CPROF_TSKIP_NONE;
        if (e->skip) e->ph = 0;
    }
    size_t len = (size_t)(ps->p - ev0);
    if (len > UINT32_MAX) return cprof_js_fail(ps, ev0, "an event longer than 4 GB");
    e->raw_len = (uint32_t)len;
    if (e->cat && !e->skip) { /* a skipped launch must not join kernels (kind OTHER) */
        tstr *c = &t->strs[e->cat];
        if (c->kind == 0xff) c->kind = kind_of(c->s, c->len);
        e->kind = c->kind;
    }
    t->nev++;
    return CPROF_OK;
}

static int trace_events(cprof_js *ps, cprof_trace *t) {
    cprof_js_ws(ps);
    if (ps->p >= ps->end || *ps->p != '[')
        return cprof_js_fail(ps, ps->p, "\"traceEvents\" must be an array");
    t->has_events = 1;
    if (!cprof_js_open(ps, ']')) return CPROF_OK;
    for (;;) {
        int rc = event(ps, t);
        if (rc) return rc;
        int more = cprof_js_next(ps, ']', "reading traceEvents");
        if (more <= 0) return more;
        /* a trailing comma before ']' (some writers leave one): accepted */
        cprof_js_ws(ps);
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            return CPROF_OK;
        }
    }
}

/* Members of a small object at the top level, each handed to fn(key, ...). */
typedef int (*member_fn)(cprof_js *ps, cprof_trace *t, const char *k, size_t kn);

static int object_members(cprof_js *ps, cprof_trace *t, member_fn fn, const char *what) {
    if (cprof_js_expect(ps, '{', what)) return CPROF_E_FORMAT;
    ps->p--; /* back on the '{' for cprof_js_open */
    if (!cprof_js_open(ps, '}')) return CPROF_OK;
    for (;;) {
        const char *k;
        size_t kn;
        if (cprof_js_str(ps, &k, &kn)) return CPROF_E_FORMAT;
        /* the key may live in scratch, which the value's strings overwrite: copy it */
        char key[64];
        size_t keyn = kn < sizeof key ? kn : sizeof key - 1;
        memcpy(key, k, keyn);
        key[keyn] = 0;
        if (cprof_js_expect(ps, ':', "expected ':' after a key")) return CPROF_E_FORMAT;
        int rc = fn(ps, t, key, keyn);
        if (rc) return rc;
        int more = cprof_js_next(ps, '}', what);
        if (more <= 0) return more;
    }
}

/* distributedInfo's rank (>= 0) / world_size (>= 1): a whole number or digits in a string. Else
 * (1.5, -1, "one") absent, never guessed, its text in *bad for a warning. null: absent. */
static int rank_value(cprof_js *ps, cprof_trace *t, int64_t min, int64_t *out, uint32_t *bad) {
    cprof_js_ws(ps);
    const char *v0 = ps->p, *s;
    int64_t v = -1, milli;
    size_t n;
    double d;
    int exact, is_int, c = ps->p < ps->end ? *ps->p : 0;
    if (c == 'n') return cprof_js_literal(ps, "null", 4);
    if (c == '"') {
        if (cprof_js_str(ps, &s, &n)) return CPROF_E_FORMAT;
        for (size_t i = 0; i < n && n <= 15 && (i == 0 || v >= 0); i++)
            v = s[i] < '0' || s[i] > '9' ? -1 : (v < 0 ? 0 : v * 10) + (s[i] - '0');
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        if (cprof_js_num(ps, &d, &milli, &exact, &is_int)) return CPROF_E_FORMAT;
        if (d >= 0 && d < 1e15 && d == (double)(int64_t)d) v = (int64_t)d;
    } else if (cprof_js_skip(ps, 1)) {
        return CPROF_E_FORMAT;
    }
    *out = v >= min ? v : CPROF_TEV_NONE;
    return v >= min ? CPROF_OK : intern(t, v0, cprof_js_cut(v0, (size_t)(ps->p - v0), 64), bad);
}

static int dist_member(cprof_js *ps, cprof_trace *t, const char *k, size_t kn) {
    if (KEY(k, kn, "rank")) return rank_value(ps, t, 0, &t->info.rank, &t->info.rank_invalid);
    if (KEY(k, kn, "world_size"))
        return rank_value(ps, t, 1, &t->info.world_size, &t->info.world_size_invalid);
    if (KEY(k, kn, "backend")) {
        cprof_js_ws(ps);
        if (ps->p < ps->end && *ps->p == '"') {
            const char *s;
            size_t n;
            if (cprof_js_str(ps, &s, &n)) return CPROF_E_FORMAT;
            return intern(t, s, n, &t->info.backend);
        }
    }
    return cprof_js_skip(ps, 1);
}

/* The items of an array of cprof's metadata, each handed to fn (which reads or skips it); a
 * value that is not an array is skipped. */
typedef int (*item_fn)(cprof_js *ps, cprof_trace *t);

static int array_items(cprof_js *ps, cprof_trace *t, item_fn fn, const char *what) {
    cprof_js_ws(ps);
    if (ps->p >= ps->end || *ps->p != '[') return cprof_js_skip(ps, 1);
    if (!cprof_js_open(ps, ']')) return CPROF_OK;
    for (;;) {
        cprof_js_ws(ps);
        int rc = fn(ps, t);
        if (rc) return rc;
        int more = cprof_js_next(ps, ']', what);
        if (more <= 0) return more;
    }
}

/* cprof.modules: module range names (strings); anything else is skipped. */
static int module_item(cprof_js *ps, cprof_trace *t) {
    if (ps->p >= ps->end || *ps->p != '"') return cprof_js_skip(ps, 1) ? CPROF_E_FORMAT : 0;
    const char *s;
    size_t n;
    uint32_t id;
    if (cprof_js_str(ps, &s, &n)) return CPROF_E_FORMAT;
    int rc = intern(t, s, n, &id);
    if (rc) return rc;
    t->strs[id].flags |= CPROF_TSTR_MODULE;
    return CPROF_OK;
}

/* One entry of cprof.merged: {"rank": R, "pid_offset": P, "partial": B, ...}. The entry is
 * the last one appended to t->merged. */
static int merged_member(cprof_js *ps, cprof_trace *t, const char *k, size_t kn) {
    cprof_merged_input *m = &t->merged[t->info.nmerged - 1];
    cprof_js_ws(ps);
    if (KEY(k, kn, "rank")) return int_value(ps, &m->rank);
    if (KEY(k, kn, "pid_offset")) return int_value(ps, &m->pid_offset);
    if (KEY(k, kn, "first_event")) return int_value(ps, &m->first_event);
    if (KEY(k, kn, "partial") && ps->p < ps->end && (*ps->p == 't' || *ps->p == 'f')) {
        m->partial = *ps->p == 't';
        return m->partial ? cprof_js_literal(ps, "true", 4) : cprof_js_literal(ps, "false", 5);
    }
    if (KEY(k, kn, "ranked") && ps->p < ps->end && (*ps->p == 't' || *ps->p == 'f')) {
        m->ranked = *ps->p == 't';
        return m->ranked ? cprof_js_literal(ps, "true", 4) : cprof_js_literal(ps, "false", 5);
    }
    if (KEY(k, kn, "end") && ps->p < ps->end && *ps->p == '"') {
        const char *s;
        size_t n;
        if (cprof_js_str(ps, &s, &n)) return CPROF_E_FORMAT;
        return intern(t, s, n, &m->end_reason);
    }
    if (KEY(k, kn, "dropped") && ps->p < ps->end && *ps->p == '{') {
        const char *v0 = ps->p;
        int rc = cprof_js_skip(ps, 1);
        if ((size_t)(v0 - ps->base) <= UINT32_MAX)
            m->dropped = (cprof_tspan){(uint32_t)(v0 - ps->base), (uint32_t)(ps->p - v0)};
        return rc;
    }
    return cprof_js_skip(ps, 1);
}

/* cprof.merged: one object per input of `cprof merge`; anything else is skipped. */
static int merged_item(cprof_js *ps, cprof_trace *t) {
    if (ps->p >= ps->end || *ps->p != '{') return cprof_js_skip(ps, 1) ? CPROF_E_FORMAT : 0;
    if (t->info.nmerged == t->capmerged) {
        size_t cap = t->capmerged ? 2 * t->capmerged : 8;
        cprof_merged_input *m = realloc(t->merged, cap * sizeof *m);
        if (!m) return CPROF_E_NOMEM;
        t->merged = m;
        t->capmerged = cap;
    }
    t->merged[t->info.nmerged++] =
        (cprof_merged_input){CPROF_TEV_NONE, CPROF_TEV_NONE, 0, 1, 0, {0, 0}, CPROF_TEV_NONE};
    int rc = object_members(ps, t, merged_member, "reading cprof.merged");
    if (rc) return rc;
    cprof_merged_input *m = &t->merged[t->info.nmerged - 1];
    if (m->rank == CPROF_TEV_NONE || m->pid_offset == CPROF_TEV_NONE)
        t->info.nmerged--; /* not one `cprof merge` wrote: ignored */
    return CPROF_OK;
}

static int cprof_member(cprof_js *ps, cprof_trace *t, const char *k, size_t kn) {
    cprof_js_ws(ps);
    if (KEY(k, kn, "partial")) {
        if (ps->p < ps->end && *ps->p == 't') {
            t->info.partial = 1;
            return cprof_js_literal(ps, "true", 4);
        }
        if (ps->p < ps->end && *ps->p == 'f') {
            t->info.partial = 0;
            return cprof_js_literal(ps, "false", 5);
        }
    } else if (KEY(k, kn, "end") && ps->p < ps->end && *ps->p == '"') {
        const char *s;
        size_t n;
        if (cprof_js_str(ps, &s, &n)) return CPROF_E_FORMAT;
        return intern(t, s, n, &t->info.end_reason);
    } else if (KEY(k, kn, "modules")) {
        return array_items(ps, t, module_item, "reading cprof.modules");
    } else if (KEY(k, kn, "merged")) {
        return array_items(ps, t, merged_item, "reading cprof.merged");
    }
    return cprof_js_skip(ps, 1);
}

static int top_member(cprof_js *ps, cprof_trace *t, const char *k, size_t kn) {
    cprof_js_ws(ps);
    const char *v0 = ps->p;
    if (KEY(k, kn, "traceEvents")) return trace_events(ps, t);
    if (KEY(k, kn, "distributedInfo") && ps->p < ps->end && *ps->p == '{')
        return object_members(ps, t, dist_member, "reading distributedInfo");
    if (KEY(k, kn, "distributedInfo") && ps->p < ps->end && *ps->p != 'n') /* 5, [1], "0" */
        return cprof_js_skip(ps, 1) ? CPROF_E_FORMAT
                                    : intern(t, v0, cprof_js_cut(v0, (size_t)(ps->p - v0), 64),
                                             &t->info.dist_invalid);
    if (KEY(k, kn, "cprof") && ps->p < ps->end && *ps->p == '{') {
        t->info.is_cprof = 1; /* its text kept whole: the report reads its loss counters */
        int rc = object_members(ps, t, cprof_member, "reading the cprof metadata");
        if (!rc && (size_t)(v0 - ps->base) <= UINT32_MAX)
            t->info.meta = (cprof_tspan){(uint32_t)(v0 - ps->base), (uint32_t)(ps->p - v0)};
        return rc;
    }
    if (KEY(k, kn, "baseTimeNanoseconds")) return int_value(ps, &t->info.base_time_ns);
    if (KEY(k, kn, "schemaVersion") || KEY(k, kn, "trace_id")) t->info.is_torch = 1;
    int rc = cprof_js_skip(ps, 1);
    if (!rc && KEY(k, kn, "deviceProperties") && (size_t)(v0 - ps->base) <= UINT32_MAX)
        t->info.device_props = (cprof_tspan){(uint32_t)(v0 - ps->base), (uint32_t)(ps->p - v0)};
    return rc;
}

static int parse_all(cprof_js *ps, cprof_trace *t) {
    cprof_js_ws(ps);
    /* a UTF-8 byte order mark is tolerated */
    if (ps->end - ps->p >= 3 && memcmp(ps->p, "\xef\xbb\xbf", 3) == 0) ps->p += 3;
    cprof_js_ws(ps);
    if (ps->p >= ps->end) return cprof_js_fail(ps, ps->p, "reading the top level (the file is empty)");
    int rc;
    if (*ps->p == '[') { /* the array form of the Chrome format */
        rc = trace_events(ps, t);
    } else if (*ps->p == '{') {
        const char *top = ps->p;
        rc = object_members(ps, t, top_member, "reading the top-level object");
        if (!rc && !t->has_events)
            return cprof_js_fail(ps, top, "this JSON object has no \"traceEvents\" array, so it "
                                 "is not a Chrome / Kineto trace (give a .trace.json[.gz] "
                                 "written by cprof or torch.profiler)");
    } else {
        return cprof_js_fail(ps, ps->p, "a trace is a JSON object with \"traceEvents\" (or an array of "
                               "events); this is neither");
    }
    if (rc) return rc;
    /* NUL padding after the end (a preallocated file) is tolerated; anything else is not */
    for (;;) {
        cprof_js_ws(ps);
        if (ps->p < ps->end && *ps->p == 0) ps->p++;
        else break;
    }
    if (ps->p < ps->end) return cprof_js_fail(ps, ps->p, "text after the end of the trace");
    return CPROF_OK;
}

static cprof_trace *trace_new(void) {
    cprof_trace *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->capstrs = 1024;
    t->strs = malloc(t->capstrs * sizeof *t->strs);
    if (!t->strs || table_grow(t)) {
        free(t->strs);
        free(t->table);
        free(t);
        return NULL;
    }
    t->strs[0] = (tstr){"", 0, 0, CPROF_TK_OTHER, 0};
    t->nstrs = 1;
    t->info.rank = t->info.world_size = t->info.base_time_ns = CPROF_TEV_NONE;
    t->info.partial = -1;
    return t;
}

/* The id of string s, or 0 when the trace has no such string. */
static uint32_t find_str(const cprof_trace *t, const char *s, size_t n) {
    if (!t->table) return 0;
    uint32_t h = hash_bytes(s, n);
    for (uint32_t i = h & t->tmask, cur; (cur = t->table[i]) != 0; i = (i + 1) & t->tmask) {
        const tstr *e = &t->strs[cur];
        if (e->hash == h && e->len == n && memcmp(e->s, s, n) == 0) return cur;
    }
    return 0;
}

/* With with_stack, cprof writes each nn.Module call twice: its user_annotation range (named by
 * its path, listed in cprof.modules) and torch's "nn.Module: <path>" python_function twin, for
 * TensorBoard's Module view. The twins become CPROF_TK_OTHER here, so the analysis counts each
 * call once; torch's own "nn.Module: Class_N" events (the rest not a listed module) stay. */
static int mark_module_twins(cprof_trace *t) {
    static const char pre[] = "nn.Module: ";
    const size_t np = sizeof pre - 1;
    int any = 0;
    for (uint32_t id = 1; id < t->nstrs && !any; id++) any = t->strs[id].flags & CPROF_TSTR_MODULE;
    if (!any) return CPROF_OK;
    uint8_t *twin = calloc(t->nstrs, 1); /* per name: 0 not looked at, 1 a twin, 2 not */
    if (!twin) return CPROF_E_NOMEM;
    for (size_t i = 0; i < t->nev; i++) {
        cprof_tev *e = &t->ev[i];
        if (e->kind != CPROF_TK_PYTHON_FUNCTION || !e->name || e->name >= t->nstrs) continue;
        if (!twin[e->name]) {
            const tstr *n = &t->strs[e->name];
            uint32_t rest = n->len > np && memcmp(n->s, pre, np) == 0
                                ? find_str(t, n->s + np, n->len - np) : 0;
            twin[e->name] = rest && (t->strs[rest].flags & CPROF_TSTR_MODULE) ? 1 : 2;
        }
        if (twin[e->name] == 1) e->kind = CPROF_TK_OTHER;
    }
    free(twin);
    return CPROF_OK;
}

/* Parses text (owned: kept or freed here). */
static int parse_owned(char *text, size_t len, int keep_text, cprof_trace **out, char *err,
                       size_t errcap) {
    cprof_trace *t = trace_new();
    if (!t) {
        free(text);
        return CPROF_E_NOMEM;
    }
    cprof_js ps = {text, text, text + len, t, err, errcap, 0, NULL, 0};
    int rc = parse_all(&ps, t);
    free(ps.scratch);
    if (!rc) rc = mark_module_twins(t);
    if (!rc) rc = cprof_tevs_mark_duplicates(t->ev, t->nev, text);
    if (!rc) rc = cprof_tevs_pair_begin_end(t->ev, t->nev, text);
    if (!rc) rc = cprof_tevs_link_flows(t, t->ev, t->nev);
    if (rc == CPROF_E_NOMEM && err && errcap)
        snprintf(err, errcap, "out of memory while parsing the trace (%zu bytes of JSON)", len);
    t->info.text_bytes = len;
    if (rc) {
        free(text);
        cprof_trace_free(t);
        return rc;
    }
    if (keep_text) {
        t->text = text;
        t->text_len = len;
    } else {
        free(text);
    }
    *out = t;
    return CPROF_OK;
}

int cprof_trace_parse(const char *text, size_t len, int keep_text, cprof_trace **out, char *err,
                      size_t errcap) {
    if (!out || (!text && len)) return CPROF_E_ARG;
    char *copy = malloc(len + 1);
    if (!copy) return CPROF_E_NOMEM;
    if (len) memcpy(copy, text, len);
    copy[len] = 0;
    return parse_owned(copy, len, keep_text, out, err, errcap);
}

int cprof_trace_load(const char *path, int keep_text, cprof_trace **out, char *err,
                     size_t errcap, int *errno_out) {
    if (!path || !out) return CPROF_E_ARG;
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) {
        if (errno_out) *errno_out = errno ? errno : ENOMEM;
        snprintf(err, errcap, "cannot open %s: %s", path, strerror(errno ? errno : ENOMEM));
        return CPROF_E_IO;
    }
    gzbuffer(f, 1u << 18);
    size_t cap = 1u << 22, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        gzclose(f);
        return CPROF_E_NOMEM;
    }
    for (;;) {
        if (cap - len < (1u << 20)) {
            size_t ncap = cap * 2;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                gzclose(f);
                snprintf(err, errcap, "out of memory reading %s (%zu bytes so far)", path, len);
                return CPROF_E_NOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        size_t want = cap - len;
        if (want > (1u << 30)) want = 1u << 30;
        int got = gzread(f, buf + len, (unsigned)want);
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            int e = errno;
            snprintf(err, errcap, "%s: %s (%s); the file is damaged: copy or write it again",
                     path, zerr == Z_ERRNO ? "read error" : "corrupt gzip data",
                     zerr == Z_ERRNO ? strerror(e) : msg);
            free(buf);
            gzclose(f);
            if (errno_out) *errno_out = e;
            return zerr == Z_ERRNO ? CPROF_E_IO : CPROF_E_ZLIB;
        }
        if (got == 0) break;
        len += (size_t)got;
    }
    int zerr = Z_OK;
    gzerror(f, &zerr);
    int direct = gzdirect(f);
    gzclose(f);
    if (zerr == Z_BUF_ERROR && !direct) {
        snprintf(err, errcap, "%s: the gzip stream ends early after %zu bytes of JSON: the file "
                 "is truncated (cut off, or still being written)", path, len);
        free(buf);
        return CPROF_E_FORMAT;
    }
    buf[len] = 0;
    int rc = parse_owned(buf, len, keep_text, out, err, errcap);
    if (rc == CPROF_E_FORMAT && err && errcap) {
        /* name the file in front of the parser's message */
        size_t n = strlen(err);
        size_t pl = strlen(path) + 2;
        if (n + pl < errcap) {
            memmove(err + pl, err, n + 1);
            memcpy(err, path, pl - 2);
            err[pl - 2] = ':';
            err[pl - 1] = ' ';
        }
    }
    return rc;
}

void cprof_trace_free(cprof_trace *t) {
    if (!t) return;
    free(t->ev);
    if (t->parent) { /* a rank view owns its events and its windows' drop spans only */
        free((void *)t->info.dropped_windows);
        free(t);
        return;
    }
    free(t->merged);
    free(t->strs);
    free(t->table);
    free(t->text);
    for (arena_chunk *c = t->arena, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(t);
}

/* Does cprof.merged say where each input's events lie (first_event, in order, in range)? */
static int merged_windows_known(const cprof_trace *t) {
    int64_t prev = 0;
    for (size_t j = 0; j < t->info.nmerged; j++) {
        int64_t f = t->merged[j].first_event;
        if (f == CPROF_TEV_NONE || f < prev || (uint64_t)f > t->nev) return 0;
        prev = f;
    }
    return t->info.nmerged > 0;
}

int cprof_trace_merged_view_starts(const cprof_trace *t, size_t k) {
    if (k >= t->info.nmerged) return 0;
    if (merged_windows_known(t)) return 1;
    for (size_t j = 0; j < k; j++)
        if (t->merged[j].rank == t->merged[k].rank) return 0;
    return 1;
}

int cprof_trace_rank_view(const cprof_trace *t, size_t k, cprof_trace **out) {
    *out = NULL;
    if (k >= t->info.nmerged) return CPROF_E_ARG;
    const cprof_merged_input *m = &t->merged[k];
    char pre[48]; /* how cprof merge prefixed its string pids (trace_merge.c label_of) */
    int pn = m->ranked ? snprintf(pre, sizeof pre, "rank %lld ", (long long)m->rank)
                       : snprintf(pre, sizeof pre, "trace %zu ", k);
    cprof_trace *v = malloc(sizeof *v);
    if (!v) return CPROF_E_NOMEM;
    *v = *t;
    v->parent = t;
    v->merged = NULL;
    v->capmerged = 0;
    v->info.nmerged = 0;
    /* an input without a rank of its own is reported as it was: no rank, no world size (the
     * merge placed it after the ranks only to give it a process group) */
    v->info.rank = m->ranked ? m->rank : CPROF_TEV_NONE;
    int64_t ranks = 0; /* distinct ranks: a rank's windows are several inputs, one rank */
    for (size_t i = 0; i < t->info.nmerged; i++) {
        size_t j = 0;
        while (j < i && t->merged[j].rank != t->merged[i].rank) j++;
        ranks += j == i && t->merged[i].ranked;
    }
    v->info.world_size = m->ranked ? ranks : CPROF_TEV_NONE;
    v->info.partial = 0;
    v->info.end_reason = 0;
    v->info.meta = (cprof_tspan){0, 0};
    v->info.ndropped_windows = 0;
    v->info.dropped_windows = NULL;
    /* input k's events: [first, end) of traceEvents, or its rank's pid range throughout */
    int own = merged_windows_known(t);
    size_t first = own ? (size_t)m->first_event : 0, end = t->nev;
    if (own && k + 1 < t->info.nmerged) end = (size_t)t->merged[k + 1].first_event;
    cprof_tspan *drops = malloc(t->info.nmerged * sizeof *drops);
    if (!drops) {
        free(v);
        return CPROF_E_NOMEM;
    }
    for (size_t i = 0; i < t->info.nmerged; i++) {
        const cprof_merged_input *w = &t->merged[i];
        if (w->rank != m->rank || w->ranked != m->ranked || ((own || !m->ranked) && i != k))
            continue;
        if (w->end_reason && (!v->info.end_reason || (w->partial && !v->info.partial)))
            v->info.end_reason = w->end_reason; /* a partial window's reason first */
        if (w->partial) v->info.partial = 1;
        if (w->dropped.len) drops[v->info.ndropped_windows++] = w->dropped;
    }
    v->info.dropped_windows = drops;
    v->ev = NULL;
    v->nev = v->capev = 0;
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = first; i < end; i++) {
            const cprof_tev *e = &t->ev[i];
            int in;
            if (e->pid == CPROF_TEV_NONE) {
                in = 0;
            } else if (CPROF_TEV_IS_STR(e->pid)) {
                size_t sl;
                const char *s = cprof_trace_str(t, (uint32_t)(e->pid - INT64_MIN), &sl);
                in = sl >= (size_t)pn && memcmp(s, pre, (size_t)pn) == 0;
            } else { /* merge wrote rank * stride + pid, wrapping */
                in = (uint64_t)e->pid - (uint64_t)m->pid_offset < (uint64_t)CPROF_MERGE_PID_STRIDE;
            }
            if (!in) continue;
            if (pass) v->ev[v->nev++] = *e;
            else n++;
        }
        if (!pass) {
            v->ev = malloc((n ? n : 1) * sizeof *v->ev);
            if (!v->ev) {
                free(drops);
                free(v);
                return CPROF_E_NOMEM;
            }
            v->capev = n;
        }
    }
    *out = v;
    return CPROF_OK;
}

size_t cprof_trace_nevents(const cprof_trace *t) { return t->nev; }
const cprof_tev *cprof_trace_events(const cprof_trace *t) { return t->ev; }

const char *cprof_trace_str(const cprof_trace *t, uint32_t id, size_t *len) {
    if (id >= t->nstrs) id = 0;
    if (len) *len = t->strs[id].len;
    return t->strs[id].s;
}

char *cprof_trace_json(const cprof_trace *t, uint32_t id) {
    size_t n;
    const char *s = cprof_trace_str(t, id, &n);
    cprof_buf b;
    cprof_buf_init(&b);
    cprof_buf_json_str(&b, s, n);
    cprof_buf_putc(&b, 0);
    if (b.oom) {
        cprof_buf_free(&b);
        return NULL;
    }
    return b.data;
}

unsigned cprof_trace_str_flags(const cprof_trace *t, uint32_t id) {
    return id < t->nstrs ? t->strs[id].flags : 0;
}

const char *cprof_trace_text(const cprof_trace *t, size_t *len) {
    if (len) *len = t->text_len;
    return t->text;
}

const cprof_trace_info *cprof_trace_get_info(const cprof_trace *t) { return &t->info; }

/* ---- key index ---- */

static uint64_t mix64(uint64_t x) { /* murmur3's finaliser: correlation ids are sequential */
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

int cprof_keyidx_init(cprof_keyidx *m, size_t expected) {
    size_t cap = 1024;
    while (cap < expected * 2) cap *= 2;
    m->keys = malloc(cap * sizeof *m->keys);
    m->slot = malloc(cap * sizeof *m->slot);
    m->mask = cap - 1;
    m->n = 0;
    if (!m->keys || !m->slot) {
        cprof_keyidx_free(m);
        return CPROF_E_NOMEM;
    }
    for (size_t i = 0; i < cap; i++) m->keys[i] = CPROF_TEV_NONE;
    return CPROF_OK;
}

int64_t cprof_keyidx_put(cprof_keyidx *m, int64_t key, int *added) {
    *added = 0;
    if (key == CPROF_TEV_NONE || (size_t)m->n * 2 >= m->mask + 1) return -1;
    size_t h = mix64((uint64_t)key) & m->mask;
    while (m->keys[h] != CPROF_TEV_NONE && m->keys[h] != key) h = (h + 1) & m->mask;
    if (m->keys[h] == CPROF_TEV_NONE) {
        m->keys[h] = key;
        m->slot[h] = m->n++;
        *added = 1;
    }
    return m->slot[h];
}

int64_t cprof_keyidx_get(const cprof_keyidx *m, int64_t key) {
    if (key == CPROF_TEV_NONE || !m->keys) return -1;
    size_t h = mix64((uint64_t)key) & m->mask;
    while (m->keys[h] != CPROF_TEV_NONE) {
        if (m->keys[h] == key) return m->slot[h];
        h = (h + 1) & m->mask;
    }
    return -1;
}

void cprof_keyidx_free(cprof_keyidx *m) {
    free(m->keys);
    free(m->slot);
    m->keys = NULL;
    m->slot = NULL;
}
