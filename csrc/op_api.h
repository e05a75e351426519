/* The C functions cprof._C lends to cprof._torch_ops (csrc/torch_ops.cpp), the RecordFunction
 * observer built against torch, through a capsule (`cprof._C._op_api`): _C's symbols are hidden,
 * and the observer must not link against a particular build of _C. Plain C, read by C++ too.
 * A new member goes at the end with the version raised; the observer refuses another version. */
#ifndef CPROF_OP_API_H
#define CPROF_OP_API_H

#include <stddef.h>
#include <stdint.h>

#define CPROF_OP_API_VERSION 4u
#define CPROF_OP_API_CAPSULE "cprof._C._op_api"

typedef struct cprof_op_api {
    uint32_t version;  /* CPROF_OP_API_VERSION */
    uint32_t size;     /* sizeof(cprof_op_api) */
    /* an operator's name -> its name id (per-thread pointer cache; 0 when the table fails) */
    uint32_t (*name_id)(const char *name);
    /* interns len bytes (a JSON args fragment): 0 and *id, or an error code */
    int (*intern)(const char *p, size_t len, uint32_t *id);
    /* an interned text by id (NULL if unknown), for checking a cached fragment */
    const char *(*text)(uint32_t id, size_t *len);
    /* opens a cpu_op range on this thread's operator stack, its args the fragment frag_id
     * (0: none); closes the innermost one. Any thread, no GIL (events.c) */
    int (*push_op)(uint32_t name_id, uint32_t frag_id);
    int (*pop_op)(void);
    /* 1 when a window is open with CPU collection on (shapes are read only then) */
    int (*cpu_on)(void);
    /* push_op of an op torch gave a sequence number (seq >= 0): seq, its forward thread (0 for
     * a forward op) and this thread's RecordFunction id ride along, for the fwdbwd links */
    int (*push_op_seq)(uint32_t name_id, uint32_t frag_id, int64_t seq, uint64_t fwd_tid,
                       uint64_t rf_tid);
    /* a range that may end on another thread (an async RecordFunction: a collective's
     * "gloo:all_reduce"), as a user_annotation of the opening thread: 0 and *handle (0: not
     * recorded), or an error code; closed from any thread by its handle (CPROF_E_EMPTY when a
     * window's stop closed it already). No GIL. */
    int (*async_open)(uint32_t name_id, uint64_t *handle);
    int (*async_close)(uint64_t handle);
    /* profile_memory: one allocation (bytes > 0) or release (< 0) torch's allocator reported,
     * with its totals after it and its device (c10::DeviceType, index; -1 none). Any thread,
     * no GIL; 0, or an error code (not recording, or full: counted). */
    int (*mem_event)(uint64_t addr, int64_t bytes, int64_t total_allocated,
                     int64_t total_reserved, int device_type, int device_index);
} cprof_op_api;

/* The other way: what cprof._torch_ops lends the module hooks (py_hooks.c) for record_shapes,
 * in a capsule (`_torch_ops.shapes_api(...)`): reading module-call arguments through torch's
 * C++ tensors instead of Python attribute reads. Same text as py_hooks.c's own. */
#define CPROF_SHAPES_API_VERSION 1u
#define CPROF_SHAPES_API_CAPSULE "cprof._torch_ops._shapes_api"

struct _object; /* PyObject */

typedef struct cprof_shapes_api {
    uint32_t version; /* CPROF_SHAPES_API_VERSION */
    uint32_t size;    /* sizeof(cprof_shapes_api) */
    /* The fragment (`"Input Dims":[...],"Input type":[...]`) of n positional arguments, GIL
     * held: 1 when handled (*id its interned id; 0 when interning failed), 0 when an argument
     * is one the caller must read itself (a tensor subclass, an unusual dtype). Never raises. */
    int (*args_fragment)(struct _object *const *args, ptrdiff_t n, uint32_t *id);
} cprof_shapes_api;

#endif
