/* Forward -> backward links ("fwdbwd" flows): each autograd backward node to the forward op
 * that created it, found at write time. Two sources, by what the capture recorded:
 *
 * By sequence number, as torch.profiler links them. The RecordFunction observer (torch_ops.cpp)
 * keeps each op's sequence number and forward thread id (events.c: the record's two int args).
 * Torch's rule, followed here: in order of end time, a backward node (forward thread id > 0)
 * links to the forward op with its key (forward thread, sequence number) seen so far, which is
 * then used up; a forward op becomes its key's candidate when none is, or when it begins no
 * earlier than the candidate (the latest-begun op of a sequence number made the node: aten::t
 * inside aten::linear).
 *
 * By name, for ops without sequence numbers: torch's ITT hooks (ops_itt.c) pass names only. An
 * autograd.Function's names carry the pairing: its forward is recorded under its class name
 * (torch.compile's CompiledFunction, a user's Function) and its node as "<class>Backward", and
 * autograd runs one graph's nodes in reverse order of their creation. So per class a backward
 * pairs with the latest unpaired forward begun before it, a stack over all threads in time
 * order (backward runs on the autograd engine's device threads on a GPU). A Function's forward
 * runs with grad off, so a Function called inside another's forward makes no node and is no
 * candidate (reentrant activation checkpointing's first forward); one called inside a backward
 * node is (the recomputation runs with grad on). A Function called under no_grad elsewhere
 * still looks like a forward and can shift its class's later pairs by one call.
 *
 * aten ops are left out of the name pairing on purpose. Their names pair too (aten::addmm ->
 * AddmmBackward0), but an op on tensors that need no grad makes no node and still looks like a
 * forward, and a backward node runs ops of the same names (MmBackward0 runs aten::mm): by name
 * alone those links come out wrong in real models, and a wrong link is worse than none
 * (decision 80). Sequence numbers have none of those faults (decision 95).
 *
 * Runs once per write, on the snapshot, GIL released; no cost while collecting. */
#include <stdlib.h>
#include <string.h>

#include "cprof.h"

/* ---- by sequence number ---- */

typedef struct {
    uint64_t end, begin, tid, key_tid;
    int64_t seq;
    uint32_t depth;
    uint8_t bwd;
} seqrec;

static int has_seq(const cprof_record *r, uint32_t kseq, uint32_t kfwd) {
    return kfwd && r->nargs == 2 && r->arg_key[0] == kseq && r->arg_key[1] == kfwd;
}

/* end order; at one end time the inner op (it began later, or deeper) first, as it closed first */
static int cmp_seqrec(const void *a, const void *b) {
    const seqrec *x = a, *y = b;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    if (x->begin != y->begin) return x->begin > y->begin ? -1 : 1;
    if (x->depth != y->depth) return x->depth > y->depth ? -1 : 1;
    return 0;
}

typedef struct {
    uint64_t key_tid;
    int64_t seq;
    size_t rec; /* the key's candidate forward, or SIZE_MAX once used up */
    uint8_t used;
} seqslot;

static seqslot *slot_of(seqslot *tab, size_t mask, uint64_t key_tid, int64_t seq) {
    uint64_t h = (key_tid * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)seq * 0xC2B2AE3D27D4EB4Full);
    h ^= h >> 29;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask)
        if (!tab[i].used || (tab[i].key_tid == key_tid && tab[i].seq == seq)) return &tab[i];
}

/* Appends the sequence-number links of snap to *pairs (size *np, capacity *cap). */
static int build_by_seq(const cprof_snapshot *snap, uint32_t kseq, uint32_t kfwd,
                        cprof_fwdbwd **pairs, size_t *np, size_t *cap) {
    seqrec *v = NULL;
    seqslot *tab = NULL;
    size_t n = 0, capv = 0, nbwd = 0;
    int rc = CPROF_E_NOMEM;
    for (size_t i = 0; i < snap->nthreads; i++) {
        const cprof_thread_data *t = &snap->threads[i];
        for (const cprof_chunk *ch = t->chunks; ch; ch = ch->next)
            for (uint32_t k = 0; k < ch->count; k++) {
                const cprof_record *r = &ch->rec[k];
                if (r->cat != CPROF_CAT_CPU_OP || !has_seq(r, kseq, kfwd) || r->arg_val[0] < 0)
                    continue;
                uint64_t fwd = (uint64_t)r->arg_val[1];
                if (!fwd && !t->rf_tid) continue; /* a forward op of a thread with no id */
                if (n == capv && cprof_array_grow((void **)&v, &capv, sizeof *v, 256)) goto done;
                v[n++] = (seqrec){r->end_ns ? r->end_ns : snap->stop_ns, r->begin_ns, t->tid,
                                  fwd ? fwd : t->rf_tid, r->arg_val[0], r->depth, fwd != 0};
                nbwd += fwd != 0;
            }
    }
    rc = 0;
    if (!nbwd) goto done;
    rc = CPROF_E_NOMEM;
    size_t size = 16;
    while (size < 2 * n) size <<= 1;
    tab = calloc(size, sizeof *tab);
    if (!tab) goto done;
    qsort(v, n, sizeof *v, cmp_seqrec);
    for (size_t i = 0; i < n; i++) {
        seqslot *s = slot_of(tab, size - 1, v[i].key_tid, v[i].seq);
        if (v[i].bwd) {
            if (!s->used || s->rec == SIZE_MAX) continue;
            const seqrec *f = &v[s->rec];
            if (*np == *cap && cprof_array_grow((void **)pairs, cap, sizeof **pairs, 64)) goto done;
            (*pairs)[(*np)++] = (cprof_fwdbwd){f->tid, v[i].tid, f->begin, v[i].begin};
            s->rec = SIZE_MAX;
        } else if (!s->used || s->rec == SIZE_MAX || v[i].begin >= v[s->rec].begin) {
            *s = (seqslot){v[i].key_tid, v[i].seq, i, 1};
        }
    }
    rc = 0;
done:
    free(v);
    free(tab);
    return rc;
}

/* ---- by name ---- */

enum { K_UNKNOWN = 0, K_NONE, K_FWD, K_BWD };

typedef struct {
    uint64_t key;
    uint64_t begin;
    uint64_t tid;
    uint8_t bwd;
} cand;

/* FNV-1a of a class name (the key of a Function and of its "<class>Backward" node) */
static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ? h : 1;
}

static int ident_chars(const char *s, size_t n) {
    if (!n) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return 0;
    }
    return 1;
}

/* K_BWD / K_FWD with *key, or K_NONE. Only bare identifiers: class names; aten::, prim::
 * and "autograd::engine::evaluate_function: ..." are not. */
static int classify(const char *s, size_t n, uint64_t *key) {
    static const char BW[] = "Backward";
    const size_t bw = sizeof BW - 1;
    if (!ident_chars(s, n)) return K_NONE;
    size_t m = n;
    while (m && s[m - 1] >= '0' && s[m - 1] <= '9') m--;
    if (m > bw && memcmp(s + m - bw, BW, bw) == 0) {
        *key = fnv(s, m - bw);
        return K_BWD;
    }
    *key = fnv(s, n); /* an autograd.Function's forward (its class name) */
    return K_FWD;
}

static int cmp_key(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_cand(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->bwd != y->bwd) return x->bwd ? 1 : -1;  /* a forward before a backward at one time */
    return 0;
}

/* Appends the name links of snap's records without sequence numbers to *pairs. */
static int build_by_name(const cprof_snapshot *snap, uint32_t kseq, uint32_t kfwd,
                         cprof_fwdbwd **pairs, size_t *np, size_t *cap) {
    uint32_t nnames = cprof_names_count();
    uint8_t *kind = calloc(nnames ? nnames : 1, 1);
    uint64_t *keyof = calloc(nnames ? nnames : 1, sizeof *keyof);
    uint64_t *bkeys = NULL;
    cand *c = NULL;
    size_t *stack = NULL;
    int rc = CPROF_E_NOMEM;
    if (!kind || !keyof) goto done;

    /* pass 1: name kinds, and the keys some backward node has */
    size_t nb = 0, capb = 0;
    for (size_t i = 0; i < snap->nthreads; i++)
        for (const cprof_chunk *ch = snap->threads[i].chunks; ch; ch = ch->next)
            for (uint32_t k = 0; k < ch->count; k++) {
                const cprof_record *r = &ch->rec[k];
                if (r->cat != CPROF_CAT_CPU_OP || r->name_id >= nnames) continue;
                if (has_seq(r, kseq, kfwd)) continue;
                if (kind[r->name_id] == K_UNKNOWN) {
                    size_t len;
                    const char *s = cprof_names_get(r->name_id, &len);
                    kind[r->name_id] = (uint8_t)classify(s, len, &keyof[r->name_id]);
                }
                if (kind[r->name_id] != K_BWD) continue;
                if (nb == capb && cprof_array_grow((void **)&bkeys, &capb, sizeof *bkeys, 64))
                    goto done;
                bkeys[nb++] = keyof[r->name_id];
            }
    if (!nb) {
        rc = 0;
        goto done;
    }
    qsort(bkeys, nb, sizeof *bkeys, cmp_key);

    /* pass 2: backward nodes and the forwards that could own one; a thread's records are in
     * begin order, so a forward beginning before the latest candidate forward's end is inside
     * that Function's forward (grad off: no node) */
    size_t nc = 0, capc = 0;
    for (size_t i = 0; i < snap->nthreads; i++) {
        const cprof_thread_data *t = &snap->threads[i];
        uint64_t in_fwd_until = 0;
        for (const cprof_chunk *ch = t->chunks; ch; ch = ch->next)
            for (uint32_t k = 0; k < ch->count; k++) {
                const cprof_record *r = &ch->rec[k];
                if (r->cat != CPROF_CAT_CPU_OP || r->name_id >= nnames) continue;
                if (has_seq(r, kseq, kfwd)) continue;
                uint8_t kd = kind[r->name_id];
                if (kd != K_FWD && kd != K_BWD) continue;
                uint64_t key = keyof[r->name_id];
                uint64_t end = r->end_ns ? r->end_ns : snap->stop_ns;
                if (kd == K_FWD) {
                    if (!bsearch(&key, bkeys, nb, sizeof *bkeys, cmp_key)) continue;
                    if (r->begin_ns < in_fwd_until) continue;
                    in_fwd_until = end;
                }
                if (nc == capc && cprof_array_grow((void **)&c, &capc, sizeof *c, 256)) goto done;
                c[nc++] = (cand){key, r->begin_ns, t->tid, kd == K_BWD};
            }
    }
    qsort(c, nc, sizeof *c, cmp_cand);

    stack = malloc((nc ? nc : 1) * sizeof *stack);
    if (!stack) goto done;
    for (size_t g = 0; g < nc;) {
        size_t e = g, top = 0;
        while (e < nc && c[e].key == c[g].key) e++;
        for (size_t i = g; i < e; i++) {
            if (!c[i].bwd) {
                stack[top++] = i;
            } else if (top) {
                const cand *f = &c[stack[--top]];
                if (*np == *cap && cprof_array_grow((void **)pairs, cap, sizeof **pairs, 64))
                    goto done;
                (*pairs)[(*np)++] = (cprof_fwdbwd){f->tid, c[i].tid, f->begin, c[i].begin};
            }
        }
        g = e;
    }
    rc = 0;
done:
    free(kind);
    free(keyof);
    free(bkeys);
    free(c);
    free(stack);
    return rc;
}

int cprof_fwdbwd_build(const cprof_snapshot *snap, cprof_fwdbwd **out, size_t *nout) {
    *out = NULL;
    *nout = 0;
    if (!snap) return CPROF_E_ARG;
    uint32_t kseq, kfwd;
    cprof_events_seq_keys(&kseq, &kfwd);
    cprof_fwdbwd *pairs = NULL;
    size_t np = 0, cap = 0;
    int rc = build_by_name(snap, kseq, kfwd, &pairs, &np, &cap);
    if (!rc) rc = build_by_seq(snap, kseq, kfwd, &pairs, &np, &cap);
    if (rc || !np) {
        free(pairs);
        return rc;
    }
    *out = pairs;
    *nout = np;
    return 0;
}
