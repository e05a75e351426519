/* Interned names: bytes -> dense uint32 id, append-only for the life of the process.
 * Interning takes a mutex (it is rare: once per distinct name); reading a name by id takes no
 * lock, so the trace writer can resolve names with the GIL released while others intern. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cprof.h"

#define BLOCK_SHIFT 12
#define BLOCK_SIZE (1u << BLOCK_SHIFT)
#define NBLOCKS (CPROF_MAX_NAMES / BLOCK_SIZE)

typedef struct {
    const char *bytes;
    uint32_t len;
    uint32_t hash;
} name_entry;

/* Entries live in fixed blocks that never move, so a reader holding an id below the published
 * count always finds a complete entry. */
static name_entry *_Atomic blocks[NBLOCKS];
static _Atomic uint32_t published = 1; /* id 0 is reserved */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t refused;       /* interns refused for a full table (names_refused) */
static uint32_t *table;                /* open addressing: ids, 0 = empty; under lock */
static uint32_t table_cap;

static uint32_t hash_bytes(const char *s, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

static name_entry *entry(uint32_t id) {
    name_entry *b = atomic_load_explicit(&blocks[id >> BLOCK_SHIFT], memory_order_acquire);
    return b ? &b[id & (BLOCK_SIZE - 1)] : NULL;
}

static int table_grow(void) {
    uint32_t ncap = table_cap ? table_cap * 2 : 1024;
    uint32_t *nt = calloc(ncap, sizeof *nt);
    if (!nt) return CPROF_E_NOMEM;
    uint32_t n = atomic_load_explicit(&published, memory_order_relaxed);
    for (uint32_t id = 1; id < n; id++) {
        uint32_t i = entry(id)->hash & (ncap - 1);
        while (nt[i]) i = (i + 1) & (ncap - 1);
        nt[i] = id;
    }
    free(table);
    table = nt;
    table_cap = ncap;
    return CPROF_OK;
}

/* fork: the lock is held across fork() so a child never inherits it locked by a thread that
 * no longer exists (a name interned with the GIL released, e.g. GPU decode, while another
 * thread forks would otherwise deadlock the child at its first new name). */
static void atfork_prepare(void) { pthread_mutex_lock(&lock); }
static void atfork_release(void) { pthread_mutex_unlock(&lock); }
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_register(void) { pthread_atfork(atfork_prepare, atfork_release, atfork_release); }

/* CPROF_MAX_NAMES, or CPROF_NAMES_LIMIT when set lower (tests fill the table with it). Read
 * once, under the lock. */
static uint32_t names_limit(void) {
    static uint32_t limit;
    if (!limit) {
        const char *v = getenv("CPROF_NAMES_LIMIT");
        unsigned long n = v ? strtoul(v, NULL, 10) : 0;
        limit = n >= 16 && n < CPROF_MAX_NAMES ? (uint32_t)n : CPROF_MAX_NAMES;
    }
    return limit;
}

int cprof_names_intern(const char *s, size_t len, uint32_t *id) {
    if (!id || (!s && len) || len > UINT32_MAX) return CPROF_E_ARG;
    uint32_t h = hash_bytes(s, len);
    int rc = CPROF_OK;
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&lock);
    uint32_t n = atomic_load_explicit(&published, memory_order_relaxed);
    if (table_cap == 0 || (uint64_t)n * 2 >= table_cap) {
        if ((rc = table_grow()) != CPROF_OK) goto out;
    }
    uint32_t i = h & (table_cap - 1);
    for (; table[i]; i = (i + 1) & (table_cap - 1)) {
        name_entry *e = entry(table[i]);
        if (e->hash == h && e->len == len && memcmp(e->bytes, s, len) == 0) {
            *id = table[i];
            goto out;
        }
    }
    if (n >= names_limit()) {
        atomic_fetch_add_explicit(&refused, 1, memory_order_relaxed);
        rc = CPROF_E_FULL;
        goto out;
    }
    name_entry *blk = atomic_load_explicit(&blocks[n >> BLOCK_SHIFT], memory_order_relaxed);
    if (!blk) {
        blk = calloc(BLOCK_SIZE, sizeof *blk);
        if (!blk) {
            rc = CPROF_E_NOMEM;
            goto out;
        }
        atomic_store_explicit(&blocks[n >> BLOCK_SHIFT], blk, memory_order_release);
    }
    char *copy = malloc(len + 1);
    if (!copy) {
        rc = CPROF_E_NOMEM;
        goto out;
    }
    if (len) memcpy(copy, s, len);
    copy[len] = '\0';
    name_entry *e = &blk[n & (BLOCK_SIZE - 1)];
    e->bytes = copy;
    e->len = (uint32_t)len;
    e->hash = h;
    table[i] = n;
    *id = n;
    /* release: a reader that sees the new count sees the entry written above */
    atomic_store_explicit(&published, n + 1, memory_order_release);
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

const char *cprof_names_get(uint32_t id, size_t *len) {
    uint32_t n = atomic_load_explicit(&published, memory_order_acquire);
    if (id == CPROF_NAME_INVALID || id >= n) {
        if (len) *len = 0;
        return "";
    }
    name_entry *e = entry(id);
    if (len) *len = e->len;
    return e->bytes;
}

uint32_t cprof_names_count(void) { return atomic_load_explicit(&published, memory_order_acquire); }

uint64_t cprof_names_refused(void) { return atomic_load_explicit(&refused, memory_order_relaxed); }
