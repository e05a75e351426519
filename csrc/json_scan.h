/* A JSON scanner over a text in memory, for the trace reader (trace_read.c): strings
 * (unescaped only when they hold escapes), numbers (microseconds kept exact as integer
 * thousandths), structural skipping with a depth limit, and errors that say where. Pure C,
 * no allocation but the scratch buffer of unescaped strings. Any thread (one scanner each). */
#ifndef CPROF_JSON_SCAN_H
#define CPROF_JSON_SCAN_H

#include <stddef.h>

#include "cprof.h"

typedef struct cprof_js {
    const char *base, *p, *end;
    void *user; /* the trace being filled (trace_read.c) */
    char *err;
    size_t errcap;
    int failed;
    char *scratch; /* unescaped strings */
    size_t scap;
} cprof_js;

CPROF_INLINE void cprof_js_ws(cprof_js *ps) {
    const char *p = ps->p;
    while (p < ps->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    ps->p = p;
}

/* The length of s[0..n) cut to at most cap bytes, never inside a UTF-8 character (a cut one
 * read back as U+FFFD in a warning that quotes the text). */
CPROF_INLINE size_t cprof_js_cut(const char *s, size_t n, size_t cap) {
    if (n <= cap) return n;
    while (cap && ((unsigned char)s[cap] & 0xC0) == 0x80) cap--;
    return cap;
}

/* Each returns 0, CPROF_E_FORMAT (the message in err: what, where) or CPROF_E_NOMEM. */
int cprof_js_fail(cprof_js *ps, const char *at, const char *what);
int cprof_js_expect(cprof_js *ps, char c, const char *what);
/* A string: *s and *n point into the text, or into the scratch buffer (valid until the next
 * string) when it held escapes. */
int cprof_js_str(cprof_js *ps, const char **s, size_t *n);
/* A number: *d as a double, *milli as exact thousandths when it has no exponent (*exact),
 * else rounded; *is_int when it has no fraction either. Values beyond +-9.2e18 thousandths
 * saturate at INT64_MAX / INT64_MIN. The text must be NUL-terminated past ps->end. */
int cprof_js_num(cprof_js *ps, double *d, int64_t *milli, int *exact, int *is_int);
/* An integer-valued number (a fraction is truncated). */
int cprof_js_int(cprof_js *ps, int64_t *out);
/* After an element of an array (close ']') or object (close '}'): consumes a ',' and returns
 * 1 (another element follows), or consumes close and returns 0; else CPROF_E_FORMAT saying
 * what was being read (what: "reading ..."). */
int cprof_js_next(cprof_js *ps, char close, const char *what);
/* At an opening '[' or '{' (the caller checked it): consumes it; returns 0 when the container
 * is empty (its close consumed too), 1 when elements follow. */
int cprof_js_open(cprof_js *ps, char close);
/* Skips one value of any type, at most CPROF_JS_MAX_DEPTH levels deep. */
#define CPROF_JS_MAX_DEPTH 256
int cprof_js_skip(cprof_js *ps, int depth);
int cprof_js_literal(cprof_js *ps, const char *word, size_t n);

#endif
