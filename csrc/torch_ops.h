/* The RecordFunction observer (torch_ops.cpp) as its binding (py_torch_ops.cpp) sees it: C++,
 * no torch and no Python types. Error codes with a message; the binding raises. */
#ifndef CPROF_TORCH_OPS_H
#define CPROF_TORCH_OPS_H

#include <cstdint>
#include <string>
#include <vector>

#include "op_api.h"

/* The hash of a binary key (the words describing a call's arguments) for the per-thread
 * fragment caches of torch_ops.cpp and py_torch_shapes.cpp. */
inline uint64_t cprof_key_hash(const std::vector<uint64_t> &k) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ k.size();
    for (uint64_t w : k) {
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

/* The C functions of cprof._C the callbacks record with; set once, before the first add. */
void cprof_torch_ops_init(const cprof_op_api *api);
/* Adds the observer on the calling thread (torch carries it into the threads it hands work
 * to): every scope but USER_SCOPE; with shapes, each op's inputs as torch.profiler's four
 * lists. 0 and *handle, or -1 and *err. */
int cprof_torch_ops_add(int shapes, uint64_t *handle, std::string *err);
/* Adds the async-range callback, global (every thread): USER_SCOPE RecordFunctions torch marks
 * async (a process group's "gloo:all_reduce", begun on one thread, ended on another) become
 * user_annotation ranges from begin to end. Removed as the observer, from any thread.
 * 0 and *handle, or -1 and *err. */
int cprof_torch_ops_add_async(uint64_t *handle, std::string *err);
/* cprof's state in this thread's PROFILER_STATE debug info (torch carries it into the threads
 * it hands work to), for two users: CPROF_STATE_MEMORY (profile_memory: torch's CPU and CUDA
 * allocators report each allocation and release through the capsule's mem_event) and
 * CPROF_STATE_OPS (operator capture: torch's _RecordFunctionFast records only when the slot
 * holds a profiler state). push: adds the users to cprof's state, pushing it when the slot is
 * empty; 1 done, 0 the slot is taken (torch.profiler or torch's ITT state on this thread), -1
 * and *err. pop: takes the users away, and the state once it has none; 1 done (*had: the users
 * it had), 0 not ours on top (nothing done), -1 and *err. Both on the thread that pushed. */
#define CPROF_STATE_OPS 1
#define CPROF_STATE_MEMORY 2
/* CPROF_STATE_SHAPES (a record_shapes window's operators): the state's config then says
 * enabled, reporting input shapes, so torch hands the observer an autograd.Function's
 * non-tensor arguments as it hands torch.profiler's (decision 145). */
#define CPROF_STATE_SHAPES 4
int cprof_torch_ops_state_push(int users, std::string *err);
int cprof_torch_ops_state_pop(int users, int *had, std::string *err);
/* Removes it (only on the thread that added it). 0, or -1 and *err. */
int cprof_torch_ops_remove(uint64_t handle, std::string *err);
/* Interns a fragment's text through cprof._C (py_torch_shapes.cpp): 0 and *id, or an error. */
int cprof_torch_ops_intern(const char *p, size_t len, uint32_t *id);
/* Ops recorded with shapes, and shapes that could not be read, since load. */
void cprof_torch_ops_stats(uint64_t *shaped, uint64_t *errors);

#endif
