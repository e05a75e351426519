/* The names of python_function events, as torch.profiler's Python tracer spells them:
 * "{file}({first line}): {co_name}" (a frame already running when a window opens: the line
 * it is at), the file relative to the first of a list of directory
 * prefixes it lies under (the sys.path / site-packages entries torch strips, longest first,
 * given at each tracer start by cprof/_pystack.py), else whole. The tracer (py_tracer.c)
 * builds a name once per code object per session. GIL held throughout. */
#include "py_binding.h" /* Python.h first: it sets the feature macros strdup needs */

#include <stdlib.h>
#include <string.h>

static char **strip;  /* UTF-8 prefixes, each ending in a separator */
static size_t nstrip;

static void strip_free(void) {
    for (size_t i = 0; i < nstrip; i++) free(strip[i]);
    free(strip);
    strip = NULL;
    nstrip = 0;
}

int cprof_py_code_name_strip(PyObject *prefixes) {
    strip_free();
    if (!prefixes || prefixes == Py_None) return 0;
    PyObject *seq = PySequence_Fast(prefixes, "strip_prefixes must be a sequence of str");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    char **v = n ? calloc((size_t)n, sizeof *v) : NULL;
    size_t k = 0;
    if (n && !v) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        const char *u = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
        if (!u) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "strip_prefixes must be a sequence of str");
            goto fail;
        }
        if (!*u) continue; /* "" would strip nothing */
        if (!(v[k] = strdup(u))) {
            PyErr_NoMemory();
            goto fail;
        }
        k++;
    }
    Py_DECREF(seq);
    strip = v;
    nstrip = k;
    return 0;
fail:
    for (size_t i = 0; i < k; i++) free(v[i]);
    free(v);
    Py_DECREF(seq);
    return -1;
}

PyObject *cprof_py_code_name(PyCodeObject *co) { return cprof_py_code_name_at(co, -1); }

/* line < 0: the code's first line (a call made inside the window); else the line a frame
 * running when the window opened was at, as torch.profiler names those. */
PyObject *cprof_py_code_name_at(PyCodeObject *co, int line) {
    if (line < 0) line = co->co_firstlineno;
    const char *rel = NULL;
    if (nstrip) {
        Py_ssize_t flen;
        const char *f = PyUnicode_AsUTF8AndSize(co->co_filename, &flen);
        if (!f) PyErr_Clear(); /* lone surrogates: the whole name */
        for (size_t i = 0; f && i < nstrip; i++) {
            size_t plen = strlen(strip[i]);
            if ((size_t)flen > plen && memcmp(f, strip[i], plen) == 0) {
                rel = f + plen;
                break;
            }
        }
    }
    return rel ? PyUnicode_FromFormat("%s(%d): %U", rel, line, co->co_name)
               : PyUnicode_FromFormat("%U(%d): %U", co->co_filename, line, co->co_name);
}
