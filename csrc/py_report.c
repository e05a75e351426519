/* Binding of the trace reader (cprof report / cprof merge): trace_report, trace_report_bytes,
 * trace_merge. The GIL is released around loading, parsing, analysing and writing; parse
 * errors become cprof.TraceFormatError (a ValueError), unreadable files OSError. */
#include "py_binding.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "trace_read.h"

#define ERRCAP 1024

static PyObject *raise_read_error(PyObject *m, int rc, const char *err, int err_no,
                                  const char *path) {
    if (rc == CPROF_E_NOMEM) {
        PyErr_SetString(PyExc_MemoryError, err && *err ? err : "cprof: out of memory");
        return NULL;
    }
    if (rc == CPROF_E_IO) {
        PyObject *args = Py_BuildValue("(iss)", err_no, err, path ? path : "");
        if (args) {
            PyErr_SetObject(PyExc_OSError, args);
            Py_DECREF(args);
        }
        return NULL;
    }
    PyObject *type = PyObject_GetAttrString(m, "TraceFormatError");
    if (!type) return NULL;
    PyErr_SetString(type, err && *err ? err : cprof_strerror(rc));
    Py_DECREF(type);
    return NULL;
}

static int parse_opts(PyObject *kw_top, double short_gap_us, long long small, int bins,
                      cprof_report_opts *o) {
    (void)kw_top;
    if (short_gap_us < 0 || small < 0 || bins <= 0 || bins > 100000) {
        PyErr_SetString(PyExc_ValueError,
                        "cprof: short_gap_us and small_copy_bytes must be >= 0 and bins in "
                        "1..100000");
        return -1;
    }
    o->short_gap_ns = (int64_t)(short_gap_us * 1000.0);
    o->small_copy_bytes = small;
    o->bins = bins;
    return 0;
}

static PyObject *report_result(PyObject *m, cprof_trace *t, const cprof_report_opts *o,
                               const char *path, int split_ranks) {
    const cprof_trace_info *in = cprof_trace_get_info(t);
    size_t n = 1;
    if (split_ranks && in->nmerged) /* one report per input, or per rank (older merges) */
        for (size_t k = n = 0; k < in->nmerged; k++) n += cprof_trace_merged_view_starts(t, k);
    char **json = calloc(n, sizeof *json);
    if (!json) {
        cprof_trace_free(t);
        return PyErr_NoMemory();
    }
    int rc = CPROF_OK;
    Py_BEGIN_ALLOW_THREADS
    if (split_ranks && in->nmerged) { /* a merged file: one report per input, never mixed */
        for (size_t k = 0, q = 0; k < in->nmerged && !rc; k++) {
            if (!cprof_trace_merged_view_starts(t, k)) continue;
            cprof_trace *v = NULL;
            rc = cprof_trace_rank_view(t, k, &v);
            if (!rc) rc = cprof_report_build(v, o, path, &json[q++]);
            cprof_trace_free(v);
        }
    } else {
        rc = cprof_report_build(t, o, path, &json[0]);
    }
    cprof_trace_free(t);
    Py_END_ALLOW_THREADS
    PyObject *res = NULL;
    if (rc) {
        res = raise_read_error(m, rc, "cprof: the report could not be built", 0, path);
    } else if (!split_ranks) {
        res = PyUnicode_DecodeUTF8(json[0], (Py_ssize_t)strlen(json[0]), "replace");
    } else if ((res = PyList_New((Py_ssize_t)n))) {
        for (size_t k = 0; k < n; k++) {
            PyObject *s = PyUnicode_DecodeUTF8(json[k], (Py_ssize_t)strlen(json[k]), "replace");
            if (!s) {
                Py_CLEAR(res);
                break;
            }
            PyList_SET_ITEM(res, (Py_ssize_t)k, s);
        }
    }
    for (size_t k = 0; k < n; k++) free(json[k]);
    free(json);
    return res;
}

static PyObject *py_trace_report(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"path", "top", "short_gap_us", "small_copy_bytes", "bins",
                             "step_name", "split_ranks", NULL};
    PyObject *path_obj;
    int top = 20, bins = 100, split = 0;
    double short_gap_us = 10.0;
    long long small = 65536;
    const char *step_name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|idLizp", kwlist, PyUnicode_FSConverter,
                                     &path_obj, &top, &short_gap_us, &small, &bins, &step_name,
                                     &split))
        return NULL;
    cprof_report_opts o = {top, 0, 0, 0, step_name};
    if (parse_opts(NULL, short_gap_us, small, bins, &o) < 0) {
        Py_DECREF(path_obj);
        return NULL;
    }
    const char *path = PyBytes_AS_STRING(path_obj);
    char err[ERRCAP] = "";
    int err_no = 0, rc;
    cprof_trace *t = NULL;
    Py_BEGIN_ALLOW_THREADS
    /* the text is kept for the report's raw pieces (cprof.dropped); freed with the trace */
    rc = cprof_trace_load(path, 1, &t, err, sizeof err, &err_no);
    Py_END_ALLOW_THREADS
    PyObject *res = rc ? raise_read_error(m, rc, err, err_no, path)
                       : report_result(m, t, &o, path, split);
    Py_DECREF(path_obj);
    return res;
}

static PyObject *py_trace_report_bytes(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"data", "top", "short_gap_us", "small_copy_bytes", "bins",
                             "step_name", "split_ranks", NULL};
    Py_buffer buf;
    int top = 20, bins = 100, split = 0;
    double short_gap_us = 10.0;
    long long small = 65536;
    const char *step_name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|idLizp", kwlist, &buf, &top, &short_gap_us,
                                     &small, &bins, &step_name, &split))
        return NULL;
    cprof_report_opts o = {top, 0, 0, 0, step_name};
    if (parse_opts(NULL, short_gap_us, small, bins, &o) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    char err[ERRCAP] = "";
    int rc;
    cprof_trace *t = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = cprof_trace_parse(buf.buf, (size_t)buf.len, 1, &t, err, sizeof err);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (rc) return raise_read_error(m, rc, err, 0, NULL);
    return report_result(m, t, &o, "<bytes>", split);
}

static PyObject *py_trace_merge(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"paths", "out", "ranks", "gzip", "replace", "top", "step_name",
                             NULL};
    PyObject *paths_obj, *out_obj, *ranks_obj = Py_None;
    int gzip_level = 6, replace = 0, top = 20;
    const char *step_name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO&|Oipiz", kwlist, &paths_obj,
                                     PyUnicode_FSConverter, &out_obj, &ranks_obj, &gzip_level,
                                     &replace, &top, &step_name))
        return NULL;
    PyObject *result = NULL, *seq = PySequence_Fast(paths_obj, "paths must be a list of files");
    Py_ssize_t n = seq ? PySequence_Fast_GET_SIZE(seq) : 0;
    PyObject **bytes = NULL;
    const char **paths = NULL;
    int64_t *ranks = NULL;
    unsigned char *ranked = NULL; /* 0: the input carries no rank of its own */
    cprof_trace **traces = NULL;
    char **reports = NULL;
    if (!seq) goto done;
    if (n == 0 || gzip_level < 0 || gzip_level > 9) {
        PyErr_SetString(PyExc_ValueError, "cprof merge: give at least one trace; gzip is 0..9");
        goto done;
    }
    bytes = calloc((size_t)n, sizeof *bytes);
    paths = calloc((size_t)n, sizeof *paths);
    ranks = calloc((size_t)n, sizeof *ranks);
    ranked = malloc((size_t)n);
    traces = calloc((size_t)n, sizeof *traces);
    reports = calloc((size_t)n, sizeof *reports);
    if (!bytes || !paths || !ranks || !ranked || !traces || !reports) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i), &bytes[i])) goto done;
        paths[i] = PyBytes_AS_STRING(bytes[i]);
        ranks[i] = -1;
        ranked[i] = 1;
        if (ranks_obj != Py_None) {
            PyObject *r = PySequence_GetItem(ranks_obj, i);
            if (!r) goto done;
            ranks[i] = PyLong_AsLongLong(r);
            Py_DECREF(r);
            if (ranks[i] == -1 && PyErr_Occurred()) goto done;
        }
    }
    const char *out = PyBytes_AS_STRING(out_obj);
    cprof_report_opts o = {top, 10000, 65536, 100, step_name};
    char err[ERRCAP] = "";
    int rc = CPROF_OK, err_no = 0;
    Py_ssize_t failed_at = -1;
    uint64_t events = 0, nbytes = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && !rc; i++) {
        rc = cprof_trace_load(paths[i], 1, &traces[i], err, sizeof err, &err_no);
        if (!rc) rc = cprof_report_build(traces[i], &o, paths[i], &reports[i]);
        if (rc) failed_at = i;
        if (!rc && ranks[i] < 0) { /* the trace's own rank */
            int64_t r = cprof_trace_get_info(traces[i])->rank;
            if (r != CPROF_TEV_NONE && r >= 0) ranks[i] = r;
            else ranked[i] = 0;
        }
    }
    Py_ssize_t nk = 0; /* inputs with events, moved to the front: an empty one is left out
                        * (its report says so: events 0), as `cprof report` leaves it out */
    for (Py_ssize_t i = 0; i < n && !rc; i++) {
        if (!cprof_trace_nevents(traces[i])) {
            cprof_trace_free(traces[i]);
            traces[i] = NULL;
            continue;
        }
        traces[nk] = traces[i];
        ranks[nk] = ranks[i];
        ranked[nk] = ranked[i];
        paths[nk++] = paths[i];
        if (nk - 1 != i) traces[i] = NULL;
    }
    if (!rc && !nk) {
        rc = CPROF_E_FORMAT;
        if (n == 1)
            snprintf(err, sizeof err, "%s: the trace holds no events (its traceEvents list is "
                     "empty): nothing to merge", paths[0]);
        else
            snprintf(err, sizeof err, "none of the %zd inputs holds any events (their "
                     "traceEvents lists are empty): nothing to merge", n);
    }
    if (!rc) { /* inputs without a rank: places after every ranked one, labelled "trace i" */
        int64_t next = 0;
        for (Py_ssize_t i = 0; i < nk; i++)
            if (ranked[i] && ranks[i] >= next) next = ranks[i] + 1;
        for (Py_ssize_t i = 0; i < nk; i++)
            if (!ranked[i]) ranks[i] = next++;
    }
    cprof_sink *sink = NULL;
    if (!rc) {
        rc = cprof_sink_open(&sink, out, gzip_level, &err_no);
        if (rc) snprintf(err, sizeof err, "cannot create a file beside %s: %s", out, strerror(err_no));
    }
    if (!rc) {
        rc = cprof_trace_merge(traces, ranks, ranked, (size_t)nk, paths, out, sink, &events);
        if (!rc) rc = cprof_sink_finish(sink, &err_no);
        else if ((rc == CPROF_E_IO || rc == CPROF_E_ZLIB) && !err_no)
            cprof_sink_finish(sink, &err_no); /* the write's errno (ENOSPC), not "I/O error" */
        if (!rc) rc = cprof_sink_commit(sink, out, replace, &err_no);
        nbytes = cprof_sink_bytes(sink);
        if (rc == CPROF_E_EXISTS)
            snprintf(err, sizeof err, "%s exists; pass --force to replace it", out);
        else if (rc)
            snprintf(err, sizeof err, "writing %s failed: %s", out,
                     err_no ? strerror(err_no) : cprof_strerror(rc));
    }
    if (sink) cprof_sink_abort(sink);
    for (Py_ssize_t i = 0; i < n; i++) cprof_trace_free(traces[i]);
    Py_END_ALLOW_THREADS
    if (rc) {
        if (rc == CPROF_E_EXISTS) {
            PyErr_SetString(PyExc_FileExistsError, err);
        } else if (failed_at < 0 && (rc == CPROF_E_IO || rc == CPROF_E_ZLIB)) {
            PyObject *a = Py_BuildValue("(iss)", err_no ? err_no : EIO, err, out);
            if (a) {
                PyErr_SetObject(PyExc_OSError, a);
                Py_DECREF(a);
            }
        } else {
            raise_read_error(m, rc, err, err_no, failed_at >= 0 ? paths[failed_at] : out);
        }
        goto done;
    }
    PyObject *list = PyList_New(n);
    if (!list) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(reports[i], (Py_ssize_t)strlen(reports[i]), "replace");
        if (!s) {
            Py_DECREF(list);
            goto done;
        }
        PyList_SET_ITEM(list, i, s);
    }
    result = Py_BuildValue("(KKN)", (unsigned long long)events, (unsigned long long)nbytes, list);
done:
    for (Py_ssize_t i = 0; bytes && i < n; i++) Py_XDECREF(bytes[i]);
    for (Py_ssize_t i = 0; reports && i < n; i++) free(reports[i]);
    free(bytes);
    free(paths);
    free(ranks);
    free(ranked);
    free(traces);
    free(reports);
    Py_XDECREF(seq);
    Py_DECREF(out_obj);
    return result;
}

static PyMethodDef report_methods[] = {
    {"trace_report", (PyCFunction)(void (*)(void))py_trace_report, METH_VARARGS | METH_KEYWORDS,
     "trace_report(path, top=20, short_gap_us=10.0, small_copy_bytes=65536, bins=100, "
     "step_name=None, split_ranks=False) -> the report of a Chrome trace (plain or gzip) as "
     "JSON text; with split_ranks, a list of them: one per rank of a merged trace."},
    {"trace_report_bytes", (PyCFunction)(void (*)(void))py_trace_report_bytes,
     METH_VARARGS | METH_KEYWORDS, "trace_report_bytes(data, ...) -> the report of JSON bytes."},
    {"trace_merge", (PyCFunction)(void (*)(void))py_trace_merge, METH_VARARGS | METH_KEYWORDS,
     "trace_merge(paths, out, ranks=None, gzip=6, replace=False, top=20, step_name=None) -> "
     "(events, bytes, [report JSON of each input]). Inputs without events are left out of "
     "the merge (their report's trace.events is 0); none with events is a TraceFormatError."},
    {NULL, NULL, 0, NULL},
};

int cprof_py_report_add(PyObject *m) {
    PyObject *base = PyObject_GetAttrString(m, "CprofError");
    if (!base) return -1;
    PyObject *bases = PyTuple_Pack(2, base, PyExc_ValueError);
    Py_DECREF(base);
    if (!bases) return -1;
    PyObject *exc = PyErr_NewExceptionWithDoc(
        "cprof.TraceFormatError",
        "A file given to cprof report / merge is not a readable Chrome trace (malformed, "
        "truncated or not JSON); the message says where.",
        bases, NULL);
    Py_DECREF(bases);
    if (!exc) return -1;
    if (PyModule_AddObject(m, "TraceFormatError", exc) < 0) {
        Py_DECREF(exc);
        return -1;
    }
    return PyModule_AddFunctions(m, report_methods);
}
