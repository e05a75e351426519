/* profile_memory's allocation events: each allocation and release torch's allocators report
 * (CPU and CUDA caching allocator, through the MemoryReportingInfoBase torch_ops.cpp installs
 * for the window) as one fixed record: time, thread, address, bytes (< 0 released), the
 * allocator's totals after it, device. torch.profiler writes the same as "[memory]" events.
 * add() runs on any thread, without the GIL, inside torch's allocator: it takes a mutex (the
 * reports of all threads go to one array, so their order is the allocator's), allocates nothing
 * but when the array doubles (amortised), and counts what a full array (the cap) refuses.
 * start/stop are called with the GIL held; stop hands the array over. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cprof.h"

static struct {
    pthread_mutex_t lock;
    int active;
    cprof_mem_event *ev;
    size_t n, cap, max;
    uint64_t dropped;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local uint32_t my_tid;

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The lock is held across fork() so the child never inherits it locked by a thread that is
 * gone; a child forked inside a window records nothing of the parent's: the copy is freed. */
static void atfork_prepare(void) { pthread_mutex_lock(&g.lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&g.lock); }
static void atfork_child(void) {
    pthread_mutex_unlock(&g.lock);
    free(g.ev);
    g.ev = NULL;
    g.n = g.cap = 0;
    g.active = 0;
    my_tid = 0;
}
static void atfork_register(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

int cprof_mem_events_start(size_t max) {
    if (max < 16) return CPROF_E_ARG;
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&g.lock);
    free(g.ev);
    g.cap = max < 4096 ? max : 4096;
    g.ev = malloc(g.cap * sizeof *g.ev);
    g.n = 0;
    g.max = max;
    g.dropped = 0;
    g.active = g.ev != NULL;
    pthread_mutex_unlock(&g.lock);
    return g.ev ? CPROF_OK : CPROF_E_NOMEM;
}

int cprof_mem_events_add(uint64_t addr, int64_t bytes, int64_t total_allocated,
                         int64_t total_reserved, int device_type, int device_index) {
    uint64_t now = cprof_clock_now_ns();
    if (CPROF_UNLIKELY(!my_tid)) my_tid = (uint32_t)syscall(SYS_gettid);
    int rc = CPROF_OK;
    pthread_mutex_lock(&g.lock);
    if (!g.active) {
        rc = CPROF_E_STATE;
    } else {
        if (g.n == g.cap && g.cap < g.max) {
            size_t ncap = g.cap * 2 < g.max ? g.cap * 2 : g.max;
            cprof_mem_event *ne = realloc(g.ev, ncap * sizeof *ne);
            if (ne) {
                g.ev = ne;
                g.cap = ncap;
            }
        }
        if (g.n < g.cap) {
            g.ev[g.n++] = (cprof_mem_event){now, addr, bytes, total_allocated, total_reserved,
                                            my_tid, (int8_t)device_type, (int8_t)device_index, 0};
        } else {
            g.dropped++;
            rc = CPROF_E_FULL;
        }
    }
    pthread_mutex_unlock(&g.lock);
    return rc;
}

int cprof_mem_events_stop(cprof_mem_event **out, size_t *n, uint64_t *dropped) {
    pthread_mutex_lock(&g.lock);
    int was = g.active;
    *out = g.ev;
    *n = g.n;
    *dropped = g.dropped;
    g.ev = NULL;
    g.n = g.cap = 0;
    g.active = 0;
    pthread_mutex_unlock(&g.lock);
    return was ? CPROF_OK : CPROF_E_STATE;
}

int cprof_mem_events_active(void) {
    pthread_mutex_lock(&g.lock);
    int a = g.active;
    pthread_mutex_unlock(&g.lock);
    return a;
}
