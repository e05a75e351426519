/* Decoding CUPTI's completed activity buffers into cprof_gpu_records (cupti_decode.c), for
 * the collector (cupti_collect.c) once a window has stopped. Internal to those two files. */
#ifndef CPROF_CUPTI_DECODE_H
#define CPROF_CUPTI_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "cupti_abi.h"
#include "gpu.h"

typedef char *(*cxa_demangle_fn)(const char *, char *, size_t *, int *);

/* One window's decode: its snapshot, the window's bounds and its clock. The caller fills the
 * first fields, calls cprof_cupti_decode_one per record, then cprof_cupti_decoder_done. */
typedef struct cprof_cupti_decoder {
    cprof_gpu_snapshot *snap;
    uint64_t window_start_ns; /* records ending before it belong to an earlier window */
    uint64_t stop_ns;
    uint64_t host_stop_ns;  /* API calls and waits beginning later are the caller's own */
    int64_t clock_offset;   /* cprof clock = CUPTI's - offset (0: CUPTI stamps with cprof's) */
    /* the decoder's own state from here on (zeroed by the caller) */
    cprof_gpu_chunk *tail;
    cxa_demangle_fn demangle;
    uint32_t *demangled_of; /* mangled name id -> demangled id + 1 */
    uint32_t demangled_cap;
    /* NVTX ranges open (START seen, END not yet) */
    struct open_marker {
        uint32_t id, name_id, domain_id, tid, pid;
        uint64_t start;
    } *markers;
    size_t nmarkers, markers_cap;
} cprof_cupti_decoder;

/* Finds the C++ demangler for kernel names (none: names stay mangled). */
void cprof_cupti_decoder_init(cprof_cupti_decoder *d);
/* One record into the snapshot, or counted as dropped (incomplete, outside, out of memory). */
void cprof_cupti_decode_one(cprof_cupti_decoder *d, const CUpti_Activity *a);
/* NVTX ranges never closed are counted (incomplete, open_markers); the decoder's memory freed. */
void cprof_cupti_decoder_done(cprof_cupti_decoder *d);

#endif
