/* The module-range core of py_hooks.c (ModuleHooks: names, shapes, per-thread stack of open
 * module calls) as the Module.__call__ capture of py_modcall.c uses it. GIL held throughout. */
#ifndef CPROF_PY_HOOKS_H
#define CPROF_PY_HOOKS_H

#include <stdint.h>

#include <Python.h>

/* Whether o is a cprof._C.ModuleHooks. */
int cprof_hooks_check(PyObject *o);

/* Opens module m's range on this thread (what ModuleHooks.pre does): its name, with
 * record_shapes the shapes of its n inputs args (the positional arguments, then the keyword
 * arguments' values in call order), the push. Returns 1 (pushed;
 * *mark is the call's place on this thread's stack, for cprof_hooks_exit), 0 (nothing pushed:
 * a failure, counted in ModuleHooks.errors) or -1 (the name resolver raised something that is
 * not an Exception, e.g. KeyboardInterrupt, which stays set; nothing pushed). */
int cprof_hooks_enter(PyObject *hooks, PyObject *m, PyObject *const *args, Py_ssize_t n,
                      uint32_t *mark);

/* Closes the range cprof_hooks_enter pushed at mark for m, and any left open above it; nothing
 * when clear() closed it meanwhile. Does not touch a pending exception's state itself, but may
 * drop module references (the caller saves an exception in flight around it). */
void cprof_hooks_exit(PyObject *hooks, PyObject *m, uint32_t mark);

/* py_modcall.c: adds the ModuleCall type; called from cprof_py_hooks_add. */
int cprof_py_modcall_add(PyObject *m);

#endif
