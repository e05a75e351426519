/* libFuzzer harness: cprof_json_escape / cprof_buf_json_str (csrc/jsonw.c), the string escaping
 * of every trace cprof writes. Contract (csrc/cprof.h): the output is one JSON string literal
 * with ", \ and control characters escaped and invalid UTF-8 (encoded surrogates, overlong
 * forms, code points past U+10FFFF, cut sequences) replaced by U+FFFD. Checked here against an
 * independent decoder: the output is valid JSON string content (strict UTF-8 inside); decoding
 * it gives back the input where the input is valid UTF-8, and U+FFFD for each byte that does
 * not start a valid sequence otherwise; the return values and the cap are honoured. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cprof.h"

#define CHECK(cond, what)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_json_escape: %s\n", what);                                   \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* Length of the valid UTF-8 sequence at s (RFC 3629 by code point arithmetic, written apart
 * from jsonw.c's table-free checks), or 0. */
static size_t ref_seq(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n < len) return 0;
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

static int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes the JSON string literal q (n bytes, quotes included) into out (cap >= n): RFC 8259
 * rules, strict. Returns the decoded length; aborts on anything a JSON parser would reject. */
static size_t ref_decode(const unsigned char *q, size_t n, unsigned char *out) {
    CHECK(n >= 2 && q[0] == '"' && q[n - 1] == '"', "the output is not a quoted string");
    size_t o = 0;
    for (size_t i = 1; i < n - 1;) {
        unsigned c = q[i];
        CHECK(c >= 0x20, "a raw control character in the output");
        CHECK(c != '"', "an unescaped quote inside the output");
        if (c == '\\') {
            CHECK(i + 1 < n - 1, "a backslash at the end of the output");
            unsigned e = q[i + 1];
            const char *simple = strchr("\"\\/bfnrt", (int)e);
            if (e && simple) {
                static const char to[] = "\"\\/\b\f\n\r\t";
                out[o++] = (unsigned char)to[simple - "\"\\/bfnrt"];
                i += 2;
                continue;
            }
            CHECK(e == 'u' && i + 6 <= n - 1, "an invalid escape");
            int v = 0;
            for (int k = 2; k < 6; k++) {
                int h = hexval(q[i + k]);
                CHECK(h >= 0, "a \\u escape without four hex digits");
                v = v * 16 + h;
            }
            /* the writer only escapes ASCII control characters and " \ this way */
            CHECK(v < 0x80, "a \\u escape above ASCII (the writer keeps UTF-8 as it is)");
            out[o++] = (unsigned char)v;
            i += 6;
            continue;
        }
        size_t len = ref_seq(q + i, n - 1 - i);
        CHECK(len, "invalid UTF-8 in the output");
        memcpy(out + o, q + i, len);
        o += len;
        i += len;
    }
    return o;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data;
    size_t need = cprof_json_escape(s, size, NULL, 0);
    CHECK(need >= 2 && need <= size * 6 + 2, "an impossible output length");
    /* exactly need bytes: a write past the end is caught */
    unsigned char *full = malloc(need);
    CHECK(full != NULL, "out of memory");
    CHECK(cprof_json_escape(s, size, (char *)full, need) == need, "the length changed");

    /* the decoded output against the reference: valid sequences kept, bad bytes -> U+FFFD */
    unsigned char *dec = malloc(need), *want = malloc(size * 3 + 1);
    CHECK(dec && want, "out of memory");
    size_t nd = ref_decode(full, need, dec), nw = 0, bad = 0;
    for (size_t i = 0; i < size;) {
        size_t len = ref_seq(data + i, size - i);
        if (len) {
            memcpy(want + nw, data + i, len);
            nw += len;
            i += len;
        } else {
            memcpy(want + nw, "\xEF\xBF\xBD", 3);
            nw += 3;
            bad++;
            i++;
        }
    }
    CHECK(nd == nw && memcmp(dec, want, nw) == 0,
          "decoding the output does not give the input (bad bytes as U+FFFD)");

    /* cprof_buf_json_str: same bytes, and it counts the replacements */
    cprof_buf b;
    cprof_buf_init(&b);
    cprof_buf_puts(&b, "x");
    size_t replaced = cprof_buf_json_str(&b, s, size);
    CHECK(!b.oom, "out of memory");
    CHECK(replaced == bad, "cprof_buf_json_str miscounts the replaced bytes");
    CHECK(b.len == need + 1 && memcmp(b.data + 1, full, need) == 0,
          "cprof_buf_json_str and cprof_json_escape disagree");
    cprof_buf_free(&b);

    /* a short cap: the prefix, nothing written past cap */
    size_t cap = size ? data[0] % (need + 1) : 0;
    char *part = malloc(cap ? cap : 1);
    CHECK(part != NULL, "out of memory");
    CHECK(cprof_json_escape(s, size, part, cap) == need, "the length depends on the cap");
    CHECK(memcmp(part, full, cap) == 0, "a capped output is not the prefix");
    free(part);
    free(full);
    free(dec);
    free(want);
    return 0;
}
