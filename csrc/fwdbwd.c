/* Forward -> backward links ("fwdbwd" flows): each autograd.Function's backward node to the
 * forward call that created it, found by name at write time.
 *
 * torch.profiler links every forward op to its node by the sequence number RecordFunction
 * carries; torch's ITT hooks (ops_itt.c) pass names only. An autograd.Function's names carry
 * the pairing: its forward is recorded under its class name (torch.compile's CompiledFunction,
 * a user's Function) and its node as "<class>Backward", and autograd runs one graph's nodes in
 * reverse order of their creation. So per class a backward pairs with the latest unpaired
 * forward begun before it, a stack over all threads in time order (backward runs on the
 * autograd engine's device threads on a GPU). A Function's forward runs with grad off, so a
 * Function called inside another's forward makes no node and is no candidate (reentrant
 * activation checkpointing's first forward); one called inside a backward node is (the
 * recomputation runs with grad on). A Function called under no_grad elsewhere still looks like
 * a forward and can shift its class's later pairs by one call.
 *
 * aten ops are left out on purpose. Their names pair too (aten::addmm -> AddmmBackward0), but
 * an op on tensors that need no grad makes no node and still looks like a forward, and a
 * backward node runs ops of the same names (MmBackward0 runs aten::mm): by name alone those
 * links come out wrong in real models, and a wrong link is worse than none (decision 80).
 *
 * Runs once per write, on the snapshot, GIL released; no cost while collecting. */
#include <stdlib.h>
#include <string.h>

#include "cprof.h"

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

int cprof_fwdbwd_build(const cprof_snapshot *snap, cprof_fwdbwd **out, size_t *nout) {
    *out = NULL;
    *nout = 0;
    if (!snap) return CPROF_E_ARG;
    uint32_t nnames = cprof_names_count();
    uint8_t *kind = calloc(nnames ? nnames : 1, 1);
    uint64_t *keyof = calloc(nnames ? nnames : 1, sizeof *keyof);
    uint64_t *bkeys = NULL;
    cand *c = NULL;
    cprof_fwdbwd *pairs = NULL;
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

    pairs = malloc(nb * sizeof *pairs);
    stack = malloc(nc * sizeof *stack);
    if (!pairs || !stack) goto done;
    size_t np = 0;
    for (size_t g = 0; g < nc;) {
        size_t e = g, top = 0;
        while (e < nc && c[e].key == c[g].key) e++;
        for (size_t i = g; i < e; i++) {
            if (!c[i].bwd) {
                stack[top++] = i;
            } else if (top) {
                const cand *f = &c[stack[--top]];
                pairs[np++] = (cprof_fwdbwd){f->tid, c[i].tid, f->begin, c[i].begin};
            }
        }
        g = e;
    }
    *out = pairs;
    *nout = np;
    pairs = NULL;
    rc = 0;
done:
    free(kind);
    free(keyof);
    free(bkeys);
    free(c);
    free(stack);
    free(pairs);
    return rc;
}
