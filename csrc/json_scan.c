/* The JSON scanner of json_scan.h (used by trace_read.c). Any thread, one scanner each. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_scan.h"




static void where(const cprof_js *ps, const char *at, char *buf, size_t cap) {
    size_t off = (size_t)(at - ps->base);
    size_t line = 1, col = 1;
    for (const char *q = ps->base; q < at; q++) {
        if (*q == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    snprintf(buf, cap, "byte %zu (line %zu, column %zu)", off, line, col);
}

int cprof_js_fail(cprof_js *ps, const char *at, const char *what) {
    if (ps->failed) return CPROF_E_FORMAT;
    ps->failed = 1;
    char pos[96];
    where(ps, at, pos, sizeof pos);
    if (at >= ps->end) {
        snprintf(ps->err, ps->errcap,
                 "the JSON ends early at %s (%s): the file is truncated (cut off, or still "
                 "being written); copy it again or write the trace again", pos, what);
    } else {
        char near[48];
        size_t k = 0;
        for (const char *q = at; q < ps->end && k < 24; q++)
            near[k++] = (*q >= 32 && *q < 127) ? *q : '?';
        near[k] = 0;
        snprintf(ps->err, ps->errcap, "malformed JSON at %s: %s (near \"%s\")", pos, what, near);
    }
    return CPROF_E_FORMAT;
}


int cprof_js_expect(cprof_js *ps, char c, const char *what) {
    cprof_js_ws(ps);
    if (ps->p >= ps->end || *ps->p != c) return cprof_js_fail(ps, ps->p, what);
    ps->p++;
    return CPROF_OK;
}

static int put_utf8(cprof_js *ps, size_t *k, uint32_t cp) {
    char *o = ps->scratch + *k;
    if (cp < 0x80) {
        o[0] = (char)cp;
        *k += 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        *k += 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        *k += 3;
    } else {
        o[0] = (char)(0xf0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[3] = (char)(0x80 | (cp & 0x3f));
        *k += 4;
    }
    return CPROF_OK;
}

static int hex4(const char *p, uint32_t *v) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        x <<= 4;
        if (c >= '0' && c <= '9') x |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') x |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') x |= (uint32_t)(c - 'A' + 10);
        else return -1;
    }
    *v = x;
    return 0;
}

/* A string at ps->p (the opening quote). *s and *n: its bytes, in the text when it has no escape,
 * else unescaped into the scratch buffer (valid until the next string). */
int cprof_js_str(cprof_js *ps, const char **s, size_t *n) {
    cprof_js_ws(ps);
    if (ps->p >= ps->end || *ps->p != '"') return cprof_js_fail(ps, ps->p, "expected a string");
    const char *start = ++ps->p, *p = start, *end = ps->end;
    const char *q = memchr(p, '"', (size_t)(end - p));
    if (!q) return cprof_js_fail(ps, end, "reading a string");
    const char *bs = memchr(p, '\\', (size_t)(q - p));
    if (!bs) {
        for (const char *c = p; c < q; c++)
            if ((unsigned char)*c < 0x20) return cprof_js_fail(ps, c, "control character in a string");
        *s = start;
        *n = (size_t)(q - start);
        ps->p = q + 1;
        return CPROF_OK;
    }
    /* escapes: unescape into scratch; the output is never longer than the input */
    size_t k = 0;
    for (;;) {
        if (p >= end) return cprof_js_fail(ps, end, "reading a string");
        size_t need = k + 8 + (size_t)(end - p < 64 ? end - p : 64);
        if (need > ps->scap) {
            size_t cap = ps->scap ? ps->scap * 2 : 4096;
            while (cap < need) cap *= 2;
            char *nb = realloc(ps->scratch, cap);
            if (!nb) return CPROF_E_NOMEM;
            ps->scratch = nb;
            ps->scap = cap;
        }
        char c = *p;
        if (c == '"') break;
        if ((unsigned char)c < 0x20) return cprof_js_fail(ps, p, "control character in a string");
        if (c != '\\') {
            ps->scratch[k++] = c;
            p++;
            continue;
        }
        if (p + 1 >= end) return cprof_js_fail(ps, end, "reading a string escape");
        char e = p[1];
        p += 2;
        switch (e) {
        case '"': ps->scratch[k++] = '"'; break;
        case '\\': ps->scratch[k++] = '\\'; break;
        case '/': ps->scratch[k++] = '/'; break;
        case 'b': ps->scratch[k++] = '\b'; break;
        case 'f': ps->scratch[k++] = '\f'; break;
        case 'n': ps->scratch[k++] = '\n'; break;
        case 'r': ps->scratch[k++] = '\r'; break;
        case 't': ps->scratch[k++] = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (end - p < 4 || hex4(p, &cp)) return cprof_js_fail(ps, p - 2, "bad \\u escape");
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00) { /* a high surrogate wants its low half */
                uint32_t lo;
                if (end - p >= 6 && p[0] == '\\' && p[1] == 'u' && !hex4(p + 2, &lo) &&
                    lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    p += 6;
                } else {
                    cp = 0xfffd;
                }
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                cp = 0xfffd;
            }
            put_utf8(ps, &k, cp);
            break;
        }
        default: return cprof_js_fail(ps, p - 2, "unknown string escape");
        }
    }
    *s = ps->scratch;
    *n = k;
    ps->p = p + 1;
    return CPROF_OK;
}

/* A JSON number. Returns it as a double in *d and, when it has no exponent, exactly as
 * integer thousandths in *milli (µs -> ns without rounding through a double: absolute
 * microsecond timestamps need 19 digits). *is_int: no fraction and no exponent. */
static int num_full(cprof_js *ps, double *d, int64_t *milli, int *exact, int *is_int,
                    int64_t *ival) {
    cprof_js_ws(ps);
    const char *p = ps->p, *end = ps->end, *start = p;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    if (p >= end) return cprof_js_fail(ps, end, "reading a number");
    if (*p < '0' || *p > '9') return cprof_js_fail(ps, start, "expected a number");
    uint64_t ip = 0;
    int big = 0;
    while (p < end && *p >= '0' && *p <= '9') {
        if (ip > (UINT64_MAX - 9) / 10) big = 1;
        else ip = ip * 10 + (uint64_t)(*p - '0');
        p++;
    }
    uint64_t frac = 0;
    int fd = 0, round_up = 0, has_frac = 0, has_exp = 0;
    if (p < end && *p == '.') {
        has_frac = 1;
        p++;
        if (p >= end || *p < '0' || *p > '9') return cprof_js_fail(ps, p, "expected digits after '.'");
        while (p < end && *p >= '0' && *p <= '9') {
            if (fd < 3) frac = frac * 10 + (uint64_t)(*p - '0');
            else if (fd == 3) round_up = *p >= '5';
            fd++;
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        has_exp = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return cprof_js_fail(ps, p, "expected an exponent");
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    for (; fd < 3 && fd >= 0; fd++) frac *= 10;
    ps->p = p;
    *exact = !has_exp && !big && ip <= (uint64_t)INT64_MAX / 1000 - 1;
    *is_int = !has_frac && !has_exp && !big && ip <= (uint64_t)INT64_MAX;
    if (*exact) { /* the common case: no strtod */
        int64_t v = (int64_t)(ip * 1000 + frac + (uint64_t)round_up);
        *milli = neg ? -v : v;
        *d = (double)*milli / 1000.0;
    } else {
        /* the text is NUL-terminated past its end (trace_read.c), and the number was
         * validated up to p, where strtod stops too */
        *d = strtod(start, NULL);
        double x = *d * 1000.0;
        /* out of range: saturated, so callers can reject it (never wrapped, never 0) */
        *milli = x >= 9.2e18 ? INT64_MAX : x <= -9.2e18 ? INT64_MIN : (int64_t)llround(x);
    }
    if (*is_int) *ival = neg ? -(int64_t)ip : (int64_t)ip;
    else *ival = *d >= 9.2e18 ? INT64_MAX : *d <= -9.2e18 ? INT64_MIN : (int64_t)*d;
    return CPROF_OK;
}

int cprof_js_num(cprof_js *ps, double *d, int64_t *milli, int *exact, int *is_int) {
    int64_t iv;
    return num_full(ps, d, milli, exact, is_int, &iv);
}

/* An integer-valued number (a fraction is truncated). */
int cprof_js_int(cprof_js *ps, int64_t *out) {
    double d;
    int64_t m;
    int ex, ii;
    return num_full(ps, &d, &m, &ex, &ii, out);
}



int cprof_js_next(cprof_js *ps, char close, const char *what) {
    cprof_js_ws(ps);
    if (ps->p >= ps->end) return cprof_js_fail(ps, ps->end, what);
    if (*ps->p == ',') {
        ps->p++;
        return 1;
    }
    if (*ps->p == close) {
        ps->p++;
        return 0;
    }
    char msg[160];
    snprintf(msg, sizeof msg, "expected ',' or '%c' (%s)", close, what);
    return cprof_js_fail(ps, ps->p, msg);
}

int cprof_js_open(cprof_js *ps, char close) {
    ps->p++;
    cprof_js_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 0;
    }
    return 1;
}

static int skip_container(cprof_js *ps, char close, int depth) {
    if (!cprof_js_open(ps, close)) return CPROF_OK;
    for (;;) {
        if (close == '}') {
            const char *s;
            size_t n;
            if (cprof_js_str(ps, &s, &n) || cprof_js_expect(ps, ':', "expected ':' after a key")) return CPROF_E_FORMAT;
        }
        int rc = cprof_js_skip(ps, depth + 1);
        if (rc) return rc;
        int more = cprof_js_next(ps, close, "reading an object or array");
        if (more <= 0) return more;
    }
}

int cprof_js_literal(cprof_js *ps, const char *word, size_t n) {
    if ((size_t)(ps->end - ps->p) < n) return cprof_js_fail(ps, ps->end, "reading a literal");
    if (memcmp(ps->p, word, n)) return cprof_js_fail(ps, ps->p, "expected a value");
    ps->p += n;
    return CPROF_OK;
}

int cprof_js_skip(cprof_js *ps, int depth) {
    cprof_js_ws(ps);
    if (depth > CPROF_JS_MAX_DEPTH) return cprof_js_fail(ps, ps->p, "values nested too deeply");
    if (ps->p >= ps->end) return cprof_js_fail(ps, ps->end, "expected a value");
    switch (*ps->p) {
    case '{': return skip_container(ps, '}', depth);
    case '[': return skip_container(ps, ']', depth);
    case '"': {
        const char *s;
        size_t n;
        return cprof_js_str(ps, &s, &n);
    }
    case 't': return cprof_js_literal(ps, "true", 4);
    case 'f': return cprof_js_literal(ps, "false", 5);
    case 'n': return cprof_js_literal(ps, "null", 4);
    default: {
        double d;
        int64_t m;
        int ex, ii;
        return cprof_js_num(ps, &d, &m, &ex, &ii);
    }
    }
}

