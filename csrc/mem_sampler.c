/* The CPU memory counter track of profile_memory: a sampler thread that reads the process's
 * resident set (/proc/self/statm) and malloc's bytes in use (mallinfo2) at a fixed interval.
 * start/stop/sample_now are called with the GIL held (one sampler per process); sample_now (a
 * step boundary) takes the sampler's lock, which its thread holds but while waiting; the thread touches
 * no Python object and allocates nothing: its sample array is allocated at start. When the array
 * is full it halves itself (each pair keeps its larger sample) and doubles the interval, so a long
 * window keeps its whole timeline and its peaks in bounded memory. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cprof.h"

struct mallinfo2_compat { /* glibc >= 2.33's struct mallinfo2, resolved at run time */
    size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks,
        keepcost;
};
typedef struct mallinfo2_compat (*mallinfo2_fn)(void);

static struct {
    int running;
    pthread_t thread;
    pthread_mutex_t lock;      /* guards stop_flag for the condition wait */
    pthread_cond_t cond;
    int stop_flag;
    int statm_fd;
    long page_bytes;
    mallinfo2_fn mallinfo2;
    uint64_t interval_ns;
    cprof_mem_sample *s;       /* owned until stop hands it over */
    size_t n, cap;
    uint32_t halvings;
    uint64_t peak_rss, peak_heap; /* exact over every sample taken, halved or not */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER, .statm_fd = -1};

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* A child forked during a window has no sampler thread: forget the parent's (its memory is the
 * child's copy, freed here). */
static void atfork_child(void) {
    if (!g.running) return;
    free(g.s);
    g.s = NULL;
    if (g.statm_fd >= 0) close(g.statm_fd);
    g.statm_fd = -1;
    g.running = 0;
    pthread_mutex_init(&g.lock, NULL);
}
static void atfork_register(void) { pthread_atfork(NULL, NULL, atfork_child); }

static uint64_t read_rss(void) {
    char buf[128];
    ssize_t len = pread(g.statm_fd, buf, sizeof buf - 1, 0);
    if (len <= 0) return 0;
    buf[len] = 0;
    /* "size resident shared ...", in pages */
    char *p = strchr(buf, ' ');
    if (!p) return 0;
    return (uint64_t)strtoull(p + 1, NULL, 10) * (uint64_t)g.page_bytes;
}

static void take_sample(void) {
    if (g.n == g.cap) {
        /* full: halve, keeping the sample of each pair with more malloc'd bytes (the resident
         * set without mallinfo2), at its own time so the track never shows memory before it
         * was allocated, and sample half as often. The exact peaks are kept apart. */
        size_t j = 0;
        for (size_t i = 0; i + 1 < g.n; i += 2) {
            const cprof_mem_sample *a = &g.s[i], *b = &g.s[i + 1];
            int second = g.mallinfo2 ? b->heap_bytes > a->heap_bytes : b->rss_bytes > a->rss_bytes;
            g.s[j++] = second ? *b : *a;
        }
        if (g.n & 1) g.s[j++] = g.s[g.n - 1];
        g.n = j;
        g.interval_ns *= 2;
        g.halvings++;
    }
    cprof_mem_sample *s = &g.s[g.n++];
    s->rss_bytes = read_rss();
    if (g.mallinfo2) {
        struct mallinfo2_compat mi = g.mallinfo2();
        s->heap_bytes = (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
    } else {
        s->heap_bytes = 0;
    }
    s->ts_ns = cprof_clock_now_ns();
    if (s->rss_bytes > g.peak_rss) g.peak_rss = s->rss_bytes;
    if (s->heap_bytes > g.peak_heap) g.peak_heap = s->heap_bytes;
}

static void *sampler_main(void *unused) {
    (void)unused;
    pthread_mutex_lock(&g.lock);
    while (!g.stop_flag) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t ns = (uint64_t)until.tv_nsec + g.interval_ns;
        until.tv_sec += (time_t)(ns / 1000000000u);
        until.tv_nsec = (long)(ns % 1000000000u);
        int rc = pthread_cond_timedwait(&g.cond, &g.lock, &until);
        if (g.stop_flag) break;
        if (rc == ETIMEDOUT) take_sample(); /* the array is ours: stop reads it after join */
    }
    pthread_mutex_unlock(&g.lock);
    return NULL;
}

int cprof_memsamp_start(uint64_t interval_ns, size_t cap) {
    if (g.running) return CPROF_E_STATE;
    if (interval_ns < 10000u || cap < 16) return CPROF_E_ARG;
    pthread_once(&atfork_once, atfork_register);
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return CPROF_E_IO;
    cprof_mem_sample *s = malloc(cap * sizeof *s);
    if (!s) {
        close(fd);
        return CPROF_E_NOMEM;
    }
    g.statm_fd = fd;
    g.page_bytes = sysconf(_SC_PAGESIZE);
    if (g.page_bytes <= 0) g.page_bytes = 4096;
    g.mallinfo2 = (mallinfo2_fn)dlsym(RTLD_DEFAULT, "mallinfo2");
    if (g.mallinfo2) {
        /* a malloc that is not glibc's (ASan's, jemalloc preloaded) may answer all zeros:
         * then there is no malloc'd-bytes series, only the resident set */
        struct mallinfo2_compat mi = g.mallinfo2();
        if (mi.arena == 0 && mi.hblkhd == 0 && mi.uordblks == 0) g.mallinfo2 = NULL;
    }
    g.s = s;
    g.n = 0;
    g.cap = cap;
    g.halvings = 0;
    g.interval_ns = interval_ns;
    g.peak_rss = g.peak_heap = 0;
    g.stop_flag = 0;
    take_sample(); /* the window's start value, before the thread exists */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g.cond, &ca);
    pthread_condattr_destroy(&ca);
    /* the sampler thread must not take the process's signals (SIGINT, SIGTERM) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&g.thread, NULL, sampler_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        pthread_cond_destroy(&g.cond);
        free(g.s);
        g.s = NULL;
        close(g.statm_fd);
        g.statm_fd = -1;
        return CPROF_E_NOMEM;
    }
    g.running = 1;
    return CPROF_OK;
}

int cprof_memsamp_running(void) { return g.running; }

int cprof_memsamp_sample_now(void) {
    if (!g.running) return CPROF_E_STATE;
    /* the sampler thread holds the lock except while it waits: its array is ours meanwhile */
    pthread_mutex_lock(&g.lock);
    take_sample();
    pthread_mutex_unlock(&g.lock);
    return CPROF_OK;
}

int cprof_memsamp_stop(cprof_mem_samples *out) {
    if (!g.running) return CPROF_E_STATE;
    pthread_mutex_lock(&g.lock);
    g.stop_flag = 1;
    pthread_cond_signal(&g.cond);
    pthread_mutex_unlock(&g.lock);
    pthread_join(g.thread, NULL);
    pthread_cond_destroy(&g.cond);
    take_sample(); /* the window's end value */
    g.running = 0;
    close(g.statm_fd);
    g.statm_fd = -1;
    out->s = g.s;
    out->n = g.n;
    out->interval_ns = g.interval_ns;
    out->halvings = g.halvings;
    out->peak_rss_bytes = g.peak_rss;
    out->peak_heap_bytes = g.peak_heap;
    out->has_heap = g.mallinfo2 != NULL;
    g.s = NULL;
    g.n = g.cap = 0;
    return CPROF_OK;
}
