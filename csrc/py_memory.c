/* The binding of profile_memory's CPU memory sampler (mem_sampler.c): start it when a window's
 * memory tracking begins, stop it at its end and get the samples as packed bytes (what
 * Snapshot.write(mem=...) takes) with their peaks; and of its allocation events
 * (mem_events.c), packed the same way for Snapshot.write(mem_events=...). GIL held throughout. */
#define PY_SSIZE_T_CLEAN
#include "py_binding.h"

#include <stdlib.h>

#include "cprof.h"

/* mem_sampler_start(interval_us, cap): one sample now, then one every interval_us. */
static PyObject *mem_start(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "mem_sampler_start(interval_us, cap)");
        return NULL;
    }
    double interval_us = PyFloat_AsDouble(args[0]);
    if (interval_us == -1.0 && PyErr_Occurred()) return NULL;
    Py_ssize_t cap = PyLong_AsSsize_t(args[1]);
    if (cap == -1 && PyErr_Occurred()) return NULL;
    if (!(interval_us >= 10.0 && interval_us <= 60e6) || cap < 16) {
        PyErr_SetString(PyExc_ValueError, "the memory sampling interval must be 10 us to 60 s "
                                          "and the sample cap at least 16");
        return NULL;
    }
    int rc = cprof_memsamp_start((uint64_t)(interval_us * 1000.0), (size_t)cap);
    if (rc) return cprof_py_raise(m, rc, "starting the CPU memory sampler");
    Py_RETURN_NONE;
}

/* mem_sampler_stop() -> (bytes of (ts_ns, rss, heap) u64 triples, info dict) */
static PyObject *mem_stop(PyObject *m, PyObject *unused) {
    (void)unused;
    cprof_mem_samples out;
    int rc = cprof_memsamp_stop(&out);
    if (rc) return cprof_py_raise(m, rc, "stopping the CPU memory sampler (it is not running)");
    PyObject *data = PyBytes_FromStringAndSize((const char *)out.s,
                                               (Py_ssize_t)(out.n * sizeof *out.s));
    free(out.s);
    if (!data) return NULL;
    PyObject *res = Py_BuildValue(
        "(N{s:n,s:d,s:I,s:O,s:K,s:K})", data, "samples", (Py_ssize_t)out.n, "interval_us",
        (double)out.interval_ns / 1000.0, "halvings", (unsigned)out.halvings, "has_heap",
        out.has_heap ? Py_True : Py_False, "peak_rss_bytes",
        (unsigned long long)out.peak_rss_bytes, "peak_heap_bytes",
        (unsigned long long)out.peak_heap_bytes);
    return res;
}

/* mem_sampler_sample(): a sample now (at a step boundary); False when the sampler is off */
static PyObject *mem_sample(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyBool_FromLong(cprof_memsamp_sample_now() == CPROF_OK);
}

static PyObject *mem_running(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyBool_FromLong(cprof_memsamp_running());
}

/* mem_events_start(max): an empty array of at most max allocation events, recording from now */
static PyObject *mev_start(PyObject *m, PyObject *arg) {
    Py_ssize_t max = PyLong_AsSsize_t(arg);
    if (max == -1 && PyErr_Occurred()) return NULL;
    if (max < 16) {
        PyErr_SetString(PyExc_ValueError, "mem_events_start: max must be at least 16");
        return NULL;
    }
    int rc = cprof_mem_events_start((size_t)max);
    if (rc) return cprof_py_raise(m, rc, "starting the allocation events");
    Py_RETURN_NONE;
}

/* mem_events_stop() -> (bytes of cprof_mem_event records, dropped) */
static PyObject *mev_stop(PyObject *m, PyObject *unused) {
    (void)unused;
    cprof_mem_event *ev = NULL;
    size_t n = 0;
    uint64_t dropped = 0;
    int rc = cprof_mem_events_stop(&ev, &n, &dropped);
    if (rc) {
        free(ev);
        return cprof_py_raise(m, rc, "stopping the allocation events (they were not started)");
    }
    PyObject *data = PyBytes_FromStringAndSize(ev ? (const char *)ev : "",
                                               (Py_ssize_t)(n * sizeof *ev));
    free(ev);
    if (!data) return NULL;
    return Py_BuildValue("(NK)", data, (unsigned long long)dropped);
}

static PyObject *mev_active(PyObject *m, PyObject *unused) {
    (void)m;
    (void)unused;
    return PyBool_FromLong(cprof_mem_events_active());
}

static PyMethodDef memory_methods[] = {
    {"mem_events_start", (PyCFunction)mev_start, METH_O,
     "mem_events_start(max): records torch's allocation reports (profile_memory) from now, at "
     "most max (the rest are counted as dropped)."},
    {"mem_events_stop", (PyCFunction)mev_stop, METH_NOARGS,
     "mem_events_stop() -> (events bytes, dropped): stops and hands over the events, packed as "
     "(ts_ns u64, addr u64, bytes i64, total_allocated i64, total_reserved i64, tid u32, "
     "device_type i8, device_index i8, pad u16)."},
    {"mem_events_active", (PyCFunction)mev_active, METH_NOARGS,
     "True while allocation events are recorded."},
    {"mem_sampler_start", (PyCFunction)(void (*)(void))mem_start, METH_FASTCALL,
     "mem_sampler_start(interval_us, cap): starts the CPU memory sampler thread."},
    {"mem_sampler_stop", (PyCFunction)mem_stop, METH_NOARGS,
     "mem_sampler_stop() -> (samples bytes, info): stops it and returns its samples."},
    {"mem_sampler_sample", (PyCFunction)mem_sample, METH_NOARGS,
     "mem_sampler_sample() -> bool: one sample now (a step boundary), if the sampler runs."},
    {"mem_sampler_running", (PyCFunction)mem_running, METH_NOARGS,
     "True while the CPU memory sampler runs."},
    {NULL, NULL, 0, NULL},
};

int cprof_py_memory_add(PyObject *m) { return PyModule_AddFunctions(m, memory_methods); }
