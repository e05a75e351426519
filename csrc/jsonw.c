/* JSON text building: a growable byte buffer, fast integer and fixed-point formatting, and
 * string escaping that always yields valid JSON (invalid UTF-8 becomes U+FFFD).
 * Pure C, no globals: any thread, GIL not needed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cprof.h"

void cprof_buf_init(cprof_buf *b) { memset(b, 0, sizeof *b); }

void cprof_buf_free(cprof_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

int cprof_array_grow(void **arr, size_t *cap, size_t elem, size_t first) {
    size_t ncap = *cap ? *cap * 2 : first;
    if (ncap < *cap || ncap > SIZE_MAX / elem) return CPROF_E_NOMEM;
    void *n = realloc(*arr, ncap * elem);
    if (!n) return CPROF_E_NOMEM;
    *arr = n;
    *cap = ncap;
    return CPROF_OK;
}

int cprof_buf_reserve(cprof_buf *b, size_t extra) {
    if (b->oom) return CPROF_E_NOMEM;
    if (b->cap - b->len >= extra) return CPROF_OK;
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap - b->len < extra) ncap *= 2;
    char *nd = realloc(b->data, ncap);
    if (!nd) {
        b->oom = 1;
        return CPROF_E_NOMEM;
    }
    b->data = nd;
    b->cap = ncap;
    return CPROF_OK;
}

void cprof_buf_put(cprof_buf *b, const void *data, size_t len) {
    if (cprof_buf_reserve(b, len)) return;
    if (len) memcpy(b->data + b->len, data, len); /* data may be NULL when len is 0 */
    b->len += len;
}

void cprof_buf_puts(cprof_buf *b, const char *s) { cprof_buf_put(b, s, strlen(s)); }

static const char digit_pairs[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Writes v in decimal at p (enough room assumed), returns the length. */
static size_t fmt_u64(char *p, uint64_t v) {
    char tmp[24];
    char *e = tmp + sizeof tmp, *s = e;
    while (v >= 100) {
        unsigned i = (unsigned)(v % 100) * 2;
        v /= 100;
        *--s = digit_pairs[i + 1];
        *--s = digit_pairs[i];
    }
    if (v >= 10) {
        unsigned i = (unsigned)v * 2;
        *--s = digit_pairs[i + 1];
        *--s = digit_pairs[i];
    } else {
        *--s = (char)('0' + v);
    }
    size_t n = (size_t)(e - s);
    memcpy(p, s, n);
    return n;
}

void cprof_buf_u64(cprof_buf *b, uint64_t v) {
    if (cprof_buf_reserve(b, 24)) return;
    b->len += fmt_u64(b->data + b->len, v);
}

void cprof_buf_i64(cprof_buf *b, int64_t v) {
    if (cprof_buf_reserve(b, 24)) return;
    char *p = b->data + b->len;
    size_t n = 0;
    uint64_t u = (uint64_t)v;
    if (v < 0) {
        p[n++] = '-';
        u = 0 - u;
    }
    n += fmt_u64(p + n, u);
    b->len += n;
}

void cprof_buf_us3(cprof_buf *b, int64_t ns) {
    if (cprof_buf_reserve(b, 28)) return;
    char *p = b->data + b->len;
    size_t n = 0;
    uint64_t u = (uint64_t)ns;
    if (ns < 0) {
        p[n++] = '-';
        u = 0 - u;
    }
    n += fmt_u64(p + n, u / 1000);
    unsigned f = (unsigned)(u % 1000);
    p[n++] = '.';
    p[n++] = (char)('0' + f / 100);
    p[n++] = (char)('0' + (f / 10) % 10);
    p[n++] = (char)('0' + f % 10);
    b->len += n;
}

/* What the fixed-point writers cannot print as digits: not finite (null), or too large for
 * their scaled int64 (printed as an integer). 1 when v was written here. */
static int put_unscaled(cprof_buf *b, double v, double limit) {
    if (!isfinite(v)) cprof_buf_puts(b, "null");
    else if (fabs(v) >= limit) cprof_buf_i64(b, (int64_t)v);
    else return 0;
    return 1;
}

void cprof_buf_f3(cprof_buf *b, double v) {
    if (!put_unscaled(b, v, 9e15)) cprof_buf_us3(b, (int64_t)llround(v * 1000.0));
}

void cprof_buf_f6(cprof_buf *b, double v) {
    if (put_unscaled(b, v, 9e12)) return;
    int64_t u = llround(v * 1e6);
    if (u < 0) {
        cprof_buf_put(b, "-", 1);
        u = -u;
    }
    cprof_buf_i64(b, u / 1000000);
    char frac[8];
    int64_t f = u % 1000000;
    for (int i = 6; i >= 1; i--, f /= 10) frac[i] = (char)('0' + f % 10);
    frac[0] = '.';
    cprof_buf_put(b, frac, 7);
}

/* Length of a valid UTF-8 sequence starting at s (n bytes available), or 0 if invalid.
 * Rejects overlong forms, UTF-16 surrogates (what Python's surrogatepass produces) and
 * code points above U+10FFFF. */
static size_t utf8_valid_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0; /* > U+10FFFF */
        return 4;
    }
    return 0;
}

/* 1 where a byte can be copied as it is (printable ASCII other than " and \). */
static const unsigned char plain[256] = {
    0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
    1,1,0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
    1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,1,1,1,
    1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
    0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
    0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
    0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
    0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
};

static size_t escape_into(cprof_buf *b, const char *str, size_t len) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *s = (const unsigned char *)str;
    size_t replaced = 0, i = 0;
    /* worst case: every byte becomes a 6-byte escape */
    if (cprof_buf_reserve(b, len * 6 + 2)) return 0;
    char *p = b->data + b->len;
    *p++ = '"';
    while (i < len) {
        size_t run = i;
        while (run < len && plain[s[run]]) run++;
        if (run > i) {
            memcpy(p, s + i, run - i);
            p += run - i;
            i = run;
            if (i == len) break;
        }
        unsigned char c = s[i];
        if (c < 0x80) {
            *p++ = '\\';
            switch (c) {
            case '"': *p++ = '"'; break;
            case '\\': *p++ = '\\'; break;
            case '\n': *p++ = 'n'; break;
            case '\r': *p++ = 'r'; break;
            case '\t': *p++ = 't'; break;
            case '\b': *p++ = 'b'; break;
            case '\f': *p++ = 'f'; break;
            default:
                *p++ = 'u';
                *p++ = '0';
                *p++ = '0';
                *p++ = hex[c >> 4];
                *p++ = hex[c & 15];
            }
            i++;
            continue;
        }
        size_t n = utf8_valid_len(s + i, len - i);
        if (n) {
            memcpy(p, s + i, n);
            p += n;
            i += n;
        } else {
            memcpy(p, "\xEF\xBF\xBD", 3); /* U+FFFD for one bad byte */
            p += 3;
            i++;
            replaced++;
        }
    }
    *p++ = '"';
    b->len = (size_t)(p - b->data);
    return replaced;
}

size_t cprof_buf_json_str(cprof_buf *b, const char *s, size_t len) { return escape_into(b, s, len); }

size_t cprof_json_escape(const char *s, size_t len, char *out, size_t cap) {
    cprof_buf b;
    cprof_buf_init(&b);
    escape_into(&b, s, len);
    size_t need = b.len;
    if (out && cap) {
        size_t n = need < cap ? need : cap;
        memcpy(out, b.data, n);
    }
    cprof_buf_free(&b);
    return need;
}
