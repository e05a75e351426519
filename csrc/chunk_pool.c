/* The chunk pool: the 64 KiB chunks every thread's range records live in (events.c), reused
 * before any new allocation, and the byte cap (buffer_size_mb) that bounds one window.
 * A window's chunks and the free ones count against the cap; chunks held by snapshots (the
 * results of earlier windows, alive as long as a profile or its events are) do not: results a
 * program keeps must not make its next window drop ranges (decision 137). Freed snapshots'
 * chunks come back to the pool, which gives memory above the cap back to the system.
 * Any thread (snapshots are freed with the GIL released); one mutex, taken after events.c's. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "cprof.h"

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static cprof_chunk *pool;      /* free chunks */
static uint64_t pool_free;     /* chunks on that list */
static uint64_t allocated_bytes;
static uint64_t held_bytes;    /* in snapshots */
static uint64_t cap_bytes = 256ull << 20;

/* The bytes the cap applies to: the open window's chunks and the free ones. Lock held. */
static uint64_t capped_locked(void) { return allocated_bytes - held_bytes; }

cprof_chunk *cprof_pool_get(int over_cap) {
    cprof_chunk *c = NULL;
    pthread_mutex_lock(&pool_lock);
    if (pool) {
        c = pool;
        pool = c->next;
        pool_free--;
    } else if (over_cap || capped_locked() + sizeof(cprof_chunk) <= cap_bytes) {
        c = malloc(sizeof(cprof_chunk));
        if (c) allocated_bytes += sizeof(cprof_chunk);
    }
    pthread_mutex_unlock(&pool_lock);
    if (c) {
        c->next = NULL;
        c->count = 0;
    }
    return c;
}

/* Frees pooled chunks while the capped bytes are above the cap; returns how many. */
static int trim_locked(void) {
    int n = 0;
    while (pool && capped_locked() > cap_bytes) {
        cprof_chunk *c = pool;
        pool = c->next;
        pool_free--;
        free(c);
        allocated_bytes -= sizeof(cprof_chunk);
        n++;
    }
    return n;
}

/* Chunks come from the heap (below glibc's mmap threshold), which free() returns to the
 * system only at its top: without a trim a lowered cap would not lower RSS. */
static void release_to_os(void) {
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

static uint64_t list_bytes(cprof_chunk *list, cprof_chunk **last) {
    uint64_t n = 0;
    for (; list; list = list->next, n++) *last = list;
    return n * sizeof(cprof_chunk);
}

void cprof_pool_hold(cprof_chunk *list) {
    cprof_chunk *last = NULL;
    uint64_t b = list_bytes(list, &last);
    pthread_mutex_lock(&pool_lock);
    held_bytes += b;
    pthread_mutex_unlock(&pool_lock);
}

void cprof_pool_put(cprof_chunk *list, int held) {
    if (!list) return;
    cprof_chunk *last = NULL;
    uint64_t b = list_bytes(list, &last);
    pthread_mutex_lock(&pool_lock);
    if (held) held_bytes -= b;
    last->next = pool;
    pool = list;
    pool_free += b / sizeof(cprof_chunk);
    int freed = trim_locked(); /* a lowered cap, or released results: back to the system */
    pthread_mutex_unlock(&pool_lock);
    if (freed) release_to_os();
}

void cprof_pool_lock(void) { pthread_mutex_lock(&pool_lock); }
void cprof_pool_unlock(void) { pthread_mutex_unlock(&pool_lock); }

int cprof_pool_set_cap(uint64_t bytes) {
    if (bytes < sizeof(cprof_chunk)) return CPROF_E_ARG;
    pthread_mutex_lock(&pool_lock);
    cap_bytes = bytes;
    int freed = trim_locked();
    pthread_mutex_unlock(&pool_lock);
    if (freed) release_to_os();
    return CPROF_OK;
}

uint64_t cprof_events_cap(void) { return cap_bytes; }

/* which: 0 allocated, 1 free in the pool, 2 held by snapshots */
uint64_t cprof_pool_bytes(int which) {
    pthread_mutex_lock(&pool_lock);
    uint64_t b = which == 0 ? allocated_bytes : which == 1 ? pool_free * sizeof(cprof_chunk)
                                                           : held_bytes;
    pthread_mutex_unlock(&pool_lock);
    return b;
}
