/* Static descriptions of the core error codes. Any thread. */
#include "cprof.h"

_Static_assert(CPROF_MAX_DEPTH == 65535u, "the E_DEPTH message names the limit");

const char *cprof_strerror(int code) {
    switch (code) {
    case CPROF_OK: return "success";
    case CPROF_E_NOMEM: return "out of memory";
    case CPROF_E_ARG: return "invalid argument";
    case CPROF_E_STATE: return "not valid in the current state";
    case CPROF_E_EMPTY: return "no open range on this thread";
    case CPROF_E_DEPTH:
        return "ranges nested too deeply (65535 open on this thread: a push() without its pop()?)";
    case CPROF_E_IO: return "input/output error";
    case CPROF_E_ZLIB: return "zlib error";
    case CPROF_E_FULL: return "table full";
    case CPROF_E_JSON: return "invalid JSON";
    case CPROF_E_EXISTS: return "no free output file name";
    case CPROF_E_FORMAT: return "not a readable Chrome trace";
    case CPROF_E_UNAVAILABLE: return "not available";
    default: return "unknown error";
    }
}
