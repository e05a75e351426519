/* Buffered file output, plain or gzip (zlib), always into a temporary file in the target
 * directory that is renamed into place only when complete; an existing target that is not a
 * regular file (/dev/null, /dev/full, a FIFO) is written directly, never replaced.
 * One sink belongs to one thread at a time; no globals besides an atomic counter. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "cprof.h"

#define SINK_BUF (1u << 20)
#define SINK_TMP_BASE 200 /* bytes of the target's name kept in its temporary file's name */

struct cprof_sink {
    int fd;
    int gzip;
    int finished;
    int err;           /* sticky: first error code */
    int err_errno;
    int has_tmp;       /* the temp file exists and is ours */
    int direct;        /* writing straight into an existing device or FIFO: nothing to move */
    uint64_t bytes;    /* bytes written to the file */
    z_stream z;
    unsigned char *buf; /* output staging: raw bytes (plain) or compressed bytes (gzip) */
    size_t len;
    char tmp_path[PATH_MAX];
};

static _Atomic unsigned tmp_counter;

static int write_all(cprof_sink *s, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = write(s->fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            s->err_errno = errno;
            return s->err = CPROF_E_IO;
        }
        p += w;
        n -= (size_t)w;
        s->bytes += (uint64_t)w;
    }
    return CPROF_OK;
}

/* Opens s->fd: the target itself when it is an existing device or FIFO, else a new temp file
 * beside it. Returns 0, or errno. */
static int open_target(cprof_sink *s, const char *final_path) {
    /* A device or FIFO is a stream to write into, not a file to replace: renaming a temp file
     * over /dev/null (as root) would replace the device node with a regular file. */
    struct stat st;
    if (stat(final_path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        s->fd = open(final_path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (s->fd < 0) return errno;
        s->direct = 1;
        return 0;
    }
    const char *slash = strrchr(final_path, '/');
    int dirlen = slash ? (int)(slash - final_path) : 1;
    const char *dir = slash ? final_path : ".";
    const char *base = slash ? slash + 1 : final_path;
    if (slash == final_path) dirlen = 0; /* file in "/" */
    /* ".{base}.{pid}.{n}.tmp" adds up to 27 bytes: a legal name of 229-255 bytes would make it
     * longer than NAME_MAX. Its first SINK_TMP_BASE bytes (cut before a UTF-8 continuation
     * byte) are enough; O_EXCL and the counter keep names that share them apart. */
    int baselen = (int)strlen(base);
    if (baselen > SINK_TMP_BASE) {
        baselen = SINK_TMP_BASE;
        while (baselen > 0 && ((unsigned char)base[baselen] & 0xc0) == 0x80) baselen--;
    }
    for (int tries = 0; tries < 100; tries++) {
        unsigned n = atomic_fetch_add(&tmp_counter, 1);
        int k = snprintf(s->tmp_path, sizeof s->tmp_path, "%.*s/.%.*s.%d.%u.tmp", dirlen, dir,
                         baselen, base, (int)getpid(), n);
        if (k < 0 || (size_t)k >= sizeof s->tmp_path) return ENAMETOOLONG;
        /* O_EXCL with mode 0666 lets the umask decide the final permissions, like open(2) */
        s->fd = open(s->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (s->fd >= 0) {
            s->has_tmp = 1;
            return 0;
        }
        if (errno != EEXIST) break;
    }
    return errno;
}

int cprof_sink_open(cprof_sink **out, const char *final_path, int gzip_level, int *errno_out) {
    if (!out || !final_path || gzip_level < 0 || gzip_level > 9) return CPROF_E_ARG;
    cprof_sink *s = calloc(1, sizeof *s);
    if (!s) return CPROF_E_NOMEM;
    s->fd = -1;
    s->buf = malloc(SINK_BUF);
    if (!s->buf) {
        free(s);
        return CPROF_E_NOMEM;
    }
    int e = open_target(s, final_path);
    if (e) {
        if (errno_out) *errno_out = e;
        free(s->buf);
        free(s);
        return CPROF_E_IO;
    }
    if (gzip_level > 0) {
        /* windowBits 15 + 16: gzip container, readable by gzip and Python's gzip module */
        if (deflateInit2(&s->z, gzip_level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            cprof_sink_abort(s);
            return CPROF_E_ZLIB;
        }
        s->gzip = 1;
    }
    *out = s;
    return CPROF_OK;
}

static int deflate_some(cprof_sink *s, const void *data, size_t len, int flush) {
    s->z.next_in = (Bytef *)data;
    s->z.avail_in = (uInt)len;
    for (;;) {
        s->z.next_out = s->buf + s->len;
        s->z.avail_out = (uInt)(SINK_BUF - s->len);
        int zr = deflate(&s->z, flush);
        if (zr == Z_STREAM_ERROR) return s->err = CPROF_E_ZLIB;
        s->len = SINK_BUF - s->z.avail_out;
        if (s->len == SINK_BUF) {
            if (write_all(s, s->buf, s->len)) return s->err;
            s->len = 0;
        }
        if (flush == Z_FINISH ? zr == Z_STREAM_END : (s->z.avail_in == 0 && s->z.avail_out != 0))
            break;
    }
    return CPROF_OK;
}

int cprof_sink_write(cprof_sink *s, const void *data, size_t len) {
    if (s->err) return s->err;
    if (s->finished) return CPROF_E_STATE;
    if (s->gzip) {
        /* zlib takes uInt lengths: feed in pieces */
        const unsigned char *p = data;
        while (len) {
            size_t n = len > (1u << 30) ? (1u << 30) : len;
            if (deflate_some(s, p, n, Z_NO_FLUSH)) return s->err;
            p += n;
            len -= n;
        }
        return CPROF_OK;
    }
    if (s->len + len > SINK_BUF) {
        if (write_all(s, s->buf, s->len)) return s->err;
        s->len = 0;
        if (len >= SINK_BUF) return write_all(s, data, len);
    }
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    return CPROF_OK;
}

int cprof_sink_finish(cprof_sink *s, int *errno_out) {
    if (s->finished) return s->err;
    s->finished = 1;
    if (!s->err && s->gzip) deflate_some(s, NULL, 0, Z_FINISH);
    if (!s->err && s->len) write_all(s, s->buf, s->len);
    s->len = 0;
    if (s->gzip) deflateEnd(&s->z);
    if (close(s->fd) != 0 && !s->err) {
        s->err_errno = errno;
        s->err = CPROF_E_IO;
    }
    s->fd = -1;
    if (s->err && errno_out) *errno_out = s->err_errno;
    return s->err;
}

int cprof_sink_commit(cprof_sink *s, const char *path, int replace, int *errno_out) {
    int rc = cprof_sink_finish(s, errno_out);
    if (rc) return rc;
    if (s->direct) return CPROF_OK; /* written in place: there is nothing to move */
    if (!s->has_tmp) return CPROF_E_STATE;
    if (replace) {
        if (rename(s->tmp_path, path) != 0) goto io_error;
        s->has_tmp = 0;
        return CPROF_OK;
    }
    /* link() fails with EEXIST atomically: two writers can never take the same name */
    if (link(s->tmp_path, path) == 0) {
        unlink(s->tmp_path);
        s->has_tmp = 0;
        return CPROF_OK;
    }
    if (errno == EEXIST) return CPROF_E_EXISTS;
    if (errno == EPERM || errno == ENOTSUP || errno == EOPNOTSUPP || errno == EMLINK) {
        /* filesystems without hard links: check, then rename (a small window for a race) */
        if (access(path, F_OK) == 0) return CPROF_E_EXISTS;
        if (rename(s->tmp_path, path) != 0) goto io_error;
        s->has_tmp = 0;
        return CPROF_OK;
    }
io_error:
    if (errno_out) *errno_out = errno;
    return CPROF_E_IO;
}

void cprof_sink_abort(cprof_sink *s) {
    if (!s) return;
    if (s->fd >= 0) {
        if (s->gzip && !s->finished) deflateEnd(&s->z);
        close(s->fd);
    }
    if (s->has_tmp) unlink(s->tmp_path);
    free(s->buf);
    free(s);
}

uint64_t cprof_sink_bytes(const cprof_sink *s) { return s->bytes; }
