"""with_modules / record_shapes for nn.Module calls: every module call as a range named by its
qualified path (``encoder.layers.3.attn``), installed only while a window is open. Two captures:

- ``mode="call"`` (default): ``nn.Module.__call__`` is replaced by a ``_C.ModuleCall``
  (csrc/py_modcall.c) that opens the range, calls torch's own ``__call__`` and closes the range,
  also when the call raises (any BaseException). No global hook is registered, so torch's
  ``Module._call_impl`` keeps its fast path: ~0.1 us added per module call instead of ~1.4 us.
  A subclass whose own ``__call__`` does not go through ``nn.Module.__call__`` (calls
  ``forward`` or ``_call_impl`` itself) is not recorded. ``remove()`` puts torch's function back
  (the same object); if someone replaced ``Module.__call__`` in between, theirs is left in place
  with a warning, and cprof's wrapper only passes calls on from then on.
  torch.compile: reading ``nn.Module.__call__`` through the class still gives torch's
  function, which dynamo inlines, so compiled code has the graph breaks it has unprofiled;
  recording pauses while dynamo compiles (see ``_CallCapture``).
- ``mode="hooks"``: torch's global forward pre / post hooks (``always_call=True``) call
  ``_C.ModuleHooks.pre`` / ``.post``. Also records modules with their own ``__call__`` that
  run ``_call_impl``, but every module call takes torch's slow hooked path (~1.3 us), and
  dynamo graph-breaks at each module call it traces (it cannot trace the C hooks).

The per-call work is C either way (``_C.ModuleHooks``, csrc/py_hooks.c): a pointer-cache lookup,
a range push, optionally the argument shapes. Python runs once per module, to name it
(``_Resolver``).

    handle = install(record_shapes=True)   # a window must be open
    ...                                    # model(x): one range per module call
    handle.remove()                        # capture gone, names and module references dropped
"""
import os
import sys
import warnings

from . import _C, _warn

__all__ = ["install", "ModuleHooksHandle", "DTYPE_NAMES", "MODES"]

MODES = ("call", "hooks")

# What torch.profiler writes as "Input type" for a tensor of each dtype (torch 2.13: the C++
# type name of the element type). Dtypes not listed are written as str(dtype) without "torch.".
DTYPE_NAMES = {
    "float32": "float",
    "float64": "double",
    "float16": "c10::Half",
    "bfloat16": "c10::BFloat16",
    "complex32": "c10::complex<c10::Half>",
    "complex64": "c10::complex<float>",
    "complex128": "c10::complex<double>",
    "bool": "bool",
    "uint8": "unsigned char",
    "int8": "signed char",
    "int16": "short int",
    "int32": "int",
    "int64": "long int",
    "uint16": "short unsigned int",
    "uint32": "unsigned int",
    "uint64": "long unsigned int",
    "float8_e4m3fn": "c10::Float8_e4m3fn",
    "float8_e4m3fnuz": "c10::Float8_e4m3fnuz",
    "float8_e5m2": "c10::Float8_e5m2",
    "float8_e5m2fnuz": "c10::Float8_e5m2fnuz",
    "float8_e8m0fnu": "c10::Float8_e8m0fnu",
    "float4_e2m1fn_x2": "c10::Float4_e2m1fn_x2",
    "qint8": "c10::qint8",
    "quint8": "c10::quint8",
    "qint32": "c10::qint32",
    "quint4x2": "c10::quint4x2",
    "quint2x4": "c10::quint2x4",
}

_installed = None  # the one handle whose capture is installed, or None


def _in_backward():
    """Whether this thread runs autograd's backward (a graph task) now."""
    torch = sys.modules.get("torch")
    task = getattr(getattr(torch, "_C", None), "_current_graph_task_id", None)
    try:
        return task is not None and task() != -1
    except Exception:  # noqa: BLE001 - an older torch: not known, so not in backward
        return False


class _Resolver:
    """Names a module the first time the C capture sees it called from a given place (the C
    cache keeps the name for that place: the module whose forward calls it, or none; a
    module calling itself keeps its name, C sees to that).

    A child is named by its parent's path and the attribute under which the parent (or, for
    children reached through a container such as ModuleList whose own forward never runs, a
    descendant of the parent) holds it; a child shared by two parents gets each one's path.
    A child's path does not repeat the root's class: root ``MLP``, children ``encoder``,
    ``encoder.layers.3``. A module not held by its parent is ``{parent}.{Class}``. Called on
    its own (no enclosing module on this thread), a module is named by its class; in
    autograd's backward (activation checkpointing's recompute) by the path a parent's call
    last gave it in the window.
    """

    def __init__(self):
        # (id(module), its name) -> prefix of its children's paths ("" for a module called on
        # its own). Ids are stable: the C cache holds a reference to every named module until
        # clear(), which drops this too.
        self._prefix = {}
        self._path = {}  # id(module) -> the last path it was given under a parent
        self.names = set()  # every module range name given: the trace lists them (cprof report)
        self._subtrees = {}  # id(parent) -> {id(descendant): path}, built on first need
        self.on_new_module = None  # called first on each call (install sets it)

    def __call__(self, module, parent, parent_name):
        if self.on_new_module is not None:
            self.on_new_module()
        cls = type(module).__name__
        if parent is None:
            # on its own in backward (activation checkpointing recomputes a layer with no
            # module open): the path it was last given under a parent in this window, so each
            # layer keeps its own name (as roots they would all be "Block"); else its class,
            # whatever was called before (C asks again at each such call of a module that has
            # been a child)
            known = self._path.get(id(module))
            if known is not None and _in_backward():
                return known
            self._prefix[(id(module), cls)] = ""
            self.names.add(cls)
            return cls
        prefix = self._prefix.get((id(parent), parent_name))
        if prefix is None:  # the parent was named by other hooks: use what they named it
            prefix = parent_name + "."
        name = None
        children = getattr(parent, "_modules", None) or {}
        for attr, child in children.items():
            if child is module:
                name = prefix + attr
                break
        if name is None:
            tree = self._subtrees.get(id(parent))
            fresh = tree is None
            if fresh:
                tree = self._subtrees[id(parent)] = self._subtree(parent)
            path = tree.get(id(module))
            if path is None and not fresh:  # a module put into the tree since it was read
                tree = self._subtrees[id(parent)] = self._subtree(parent)
                path = tree.get(id(module))
            name = prefix + path if path else f"{parent_name}.{cls}"
        self._prefix[(id(module), name)] = name + "."
        self._path[id(module)] = name
        self.names.add(name)
        return name

    @staticmethod
    def _subtree(parent):
        try:
            return {id(m): path for path, m in parent.named_modules() if path}
        except Exception:  # noqa: BLE001 - an odd module tree only costs the nicer name
            return {}


def _dtype_names(torch):
    names = {}
    for attr, text in DTYPE_NAMES.items():
        dt = getattr(torch, attr, None)
        if isinstance(dt, torch.dtype):
            names[dt] = text
    return names


class _CallCapture:
    """mode="call": ``nn.Module.__call__`` replaced by a ``_C.ModuleCall`` wrapping torch's.

    Read through the class, ``nn.Module.__call__`` still gives torch's function (the wrapper's
    ``__get__``); only the type's ``__dict__`` and CPython's call slot see the wrapper. So
    torch.compile works as unprofiled: dynamo reads ``type(module).__call__`` when it traces a
    module call and inlines torch's function (it cannot trace the C wrapper: that would be a
    graph break at every module call), and torch._dynamo, first imported inside the window,
    keeps torch's function as "the unpatched Module.__call__". While dynamo compiles (its
    compile start / end callbacks, when torch._dynamo is imported) the wrapper is paused on the
    compiling thread: module calls made by the compilation itself (a backend running modules)
    are not recorded; other threads' calls are. ``torch._dynamo.reset()`` drops those
    callbacks; the next module named registers them again.
    """

    def __init__(self, hooks, module_cls):
        self.cls = module_cls
        self.original = module_cls.__dict__["__call__"]
        self.wrapper = _C.ModuleCall(hooks, self.original)
        self._dynamo = None  # the callback handler the callbacks are registered with
        type.__setattr__(module_cls, "__call__", self.wrapper)

    def _on_compile_start(self, _args=None):
        self.wrapper.pause()

    def _on_compile_end(self, _args=None):
        self.wrapper.resume()
        self.reinstall()

    def reinstall(self):
        """Puts the wrapper back if torch's function is in its place again: code that saves
        nn.Module.__call__ through the class (which gives torch's) and sets it back later does
        that, as torch.fx's patcher does (symbolic_trace, make_fx, so AOTAutograd while it
        compiles). Runs at each compilation's end and each time a module is named."""
        if self.wrapper.enabled and self.cls.__dict__.get("__call__") is self.original:
            type.__setattr__(self.cls, "__call__", self.wrapper)

    def on_dynamo(self, dynamo):
        handler = getattr(dynamo, "callback_handler", None)
        if handler is None or not hasattr(handler, "register_start_callback"):
            return
        if self._on_compile_start in getattr(handler, "start_callbacks", ()):
            return
        self._unregister()
        handler.register_start_callback(self._on_compile_start)
        handler.register_end_callback(self._on_compile_end)
        self._dynamo = handler

    def _unregister(self):
        handler, self._dynamo = self._dynamo, None
        if handler is None:
            return
        for unregister, cb in ((handler.remove_start_callback, self._on_compile_start),
                               (handler.remove_end_callback, self._on_compile_end)):
            try:
                unregister(cb)
            except ValueError:  # torch._dynamo.reset() cleared them
                pass

    def remove(self):
        """Stops recording and puts torch's __call__ back (unless someone replaced it: then
        theirs stays, with a warning)."""
        self._unregister()
        self.wrapper.disable()
        current = self.cls.__dict__.get("__call__")
        if current is self.wrapper:
            type.__setattr__(self.cls, "__call__", self.original)
        elif current is not self.original:
            warnings.warn(f"cprof: nn.Module.__call__ was replaced while with_modules was on "
                          f"(now {current!r}); it is left as it is, and cprof's wrapper only "
                          "passes calls on from now on", RuntimeWarning, stacklevel=4)


class _HooksCapture:
    """mode="hooks": torch's global forward pre / post hooks."""

    def __init__(self, hooks, torch_module):
        self.handles = [torch_module.register_module_forward_pre_hook(hooks.pre)]
        try:
            # always_call: post also runs when forward raises, so the range is closed there
            self.handles.append(torch_module.register_module_forward_hook(hooks.post,
                                                                          always_call=True))
        except BaseException:
            self.remove()
            raise

    def on_dynamo(self, dynamo):
        pass

    def reinstall(self):
        pass

    def remove(self):
        handles, self.handles = self.handles, []
        for h in handles:
            h.remove()


class _DynamoImport:
    """A ``sys.meta_path`` entry while a capture is installed and torch._dynamo is not imported
    yet: when torch._dynamo is first imported (a first torch.compile inside the window), the
    handle's ``_check_dynamo`` runs right after, before anything is compiled. It finds nothing
    itself (the other finders find torch._dynamo); it only wraps the loader they return."""

    _entry = None  # the one entry in sys.meta_path, or None

    def __init__(self, handle):
        self.handle = handle

    @classmethod
    def watch(cls, handle):
        cls.forget(None)
        cls._entry = cls(handle)
        sys.meta_path.insert(0, cls._entry)

    @classmethod
    def forget(cls, handle):
        """Takes the entry out (only if it watches for handle, unless handle is None)."""
        entry = cls._entry
        if entry is None or (handle is not None and entry.handle is not handle):
            return
        cls._entry = None
        entry.handle = None
        try:
            sys.meta_path.remove(entry)
        except ValueError:
            pass

    def find_spec(self, name, path=None, target=None):
        if name != "torch._dynamo" or self.handle is None:
            return None
        handle = self.handle
        self.forget(handle)
        import importlib.util
        spec = importlib.util.find_spec(name)  # the finders after this one
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenCheckDynamo(spec.loader, handle)
        return spec


class _ThenCheckDynamo:
    """A loader that runs the real one, then the handle's _check_dynamo."""

    def __init__(self, loader, handle):
        self.loader = loader
        self.handle = handle

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.handle._check_dynamo()

    def __getattr__(self, name):  # get_code, get_resource_reader...: the real loader's
        return getattr(self.loader, name)


class ModuleHooksHandle:
    """The installed capture; ``remove()`` takes it away (idempotent)."""

    def __init__(self, hooks, resolver, mode, capture):
        self.hooks = hooks
        self.resolver = resolver
        self.mode = mode
        self._capture = capture
        self._dynamo_seen = None  # the torch._dynamo module the resolver was wrapped for

    @property
    def record_shapes(self):
        return self.hooks.record_shapes

    @property
    def active(self):
        return self._capture is not None

    @property
    def wrapper(self):
        """mode="call": the _C.ModuleCall that replaced nn.Module.__call__; else None."""
        c = self._capture
        return c.wrapper if isinstance(c, _CallCapture) else None

    def _check_dynamo(self):
        """The wrapper back in place if it was put aside (_CallCapture.reinstall). Once
        torch._dynamo is imported (at install, or by a first torch.compile inside the
        window: _DynamoImport runs this right after that import), the resolver runs unseen by
        dynamo, its frame callback off as under torch._dynamo.disable (so a module first named
        inside a compiled call is not compiled as a frame of its own, which would add frames
        and graph breaks), and the call capture pauses while
        dynamo compiles. Also runs each time a module is named: torch._dynamo.reset() drops
        compile callbacks, this registers them again."""
        if self._capture is None:
            return
        self._capture.reinstall()
        dynamo = sys.modules.get("torch._dynamo")
        if dynamo is None or not hasattr(dynamo, "disable"):
            return
        if dynamo is not self._dynamo_seen:
            self._dynamo_seen = dynamo
            # C turns dynamo's frame callback off around the resolver (what dynamo.disable
            # does): disable's Python wrapper would be recorded by with_stack as user frames
            setter = getattr(getattr(dynamo, "eval_frame", None), "set_eval_frame", None)
            try:
                if callable(setter):
                    self.hooks.eval_frame = setter
                else:  # a torch without it: its wrapper, recorded under with_stack
                    self.hooks.resolver = dynamo.disable(self.resolver)
            except Exception as err:  # noqa: BLE001 - costs dynamo compiling the resolver
                warnings.warn(f"cprof: torch._dynamo.disable failed on the module resolver: "
                              f"{err}", RuntimeWarning, stacklevel=3)
        self._capture.on_dynamo(dynamo)

    def remove(self):
        """Removes the capture, closes this thread's module ranges still open, drops the
        module references. A thread inside a forward at this moment keeps its module ranges
        open until its call returns (mode "call") or the window stops (mode "hooks": they are
        truncated there)."""
        global _installed
        capture, self._capture = self._capture, None
        if capture is None:
            return
        try:
            _DynamoImport.forget(self)
            capture.remove()
        finally:
            errors = self.hooks.errors
            self.hooks.clear()
            if _installed is self:
                _installed = None
        if errors:
            _warn.warn(f"cprof: with_modules swallowed {errors} error(s) (a module was "
                       "named by its class, or its shapes were left out)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False


def _fast_shapes(torch):
    """The shape reader of cprof._torch_ops (module-call arguments read through torch's C++
    tensors, the same text; decision 94), or None: not built for this torch, or turned off
    with CPROF_FAST_SHAPES=0 (then shapes are read from Python)."""
    if os.environ.get("CPROF_FAST_SHAPES", "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    from . import _ops
    mod, _ = _ops.observer()
    base = getattr(torch._C, "TensorBase", None)
    if mod is None or base is None or not hasattr(mod, "shapes_api"):
        return None
    return mod.shapes_api(base, torch.Tensor, torch.nn.Parameter)


def install(record_shapes=False, mode="call"):
    """Installs the module capture (see the module doc for the two modes); returns a handle
    whose ``remove()`` takes it away. Only while a cprof window is open, and one at a time."""
    global _installed
    if mode not in MODES:
        raise ValueError(f"cprof: with_modules mode must be one of {MODES}, not {mode!r}")
    if not _C.active():
        raise _C.WindowStateError(
            "cprof: with_modules hooks are installed only while a cprof window is open; open a "
            "ProfilerContext first")
    if _installed is not None:
        raise _C.WindowStateError(
            "cprof: with_modules hooks are already installed; remove() them first")
    try:
        import torch
        from torch.nn.modules import module as torch_module
    except ImportError as exc:
        raise ImportError(f"cprof: with_modules and record_shapes need PyTorch, which cannot be "
                          f"imported here ({exc})") from exc
    tensor_type = getattr(torch._C, "TensorBase", None) or torch.Tensor
    resolver = _Resolver()
    hooks = _C.ModuleHooks(tensor_type, record_shapes=bool(record_shapes), resolver=resolver,
                           dtype_names=_dtype_names(torch),
                           fast_shapes=_fast_shapes(torch) if record_shapes else None)
    if mode == "call":
        capture = _CallCapture(hooks, torch.nn.Module)
    else:
        capture = _HooksCapture(hooks, torch_module)
    handle = ModuleHooksHandle(hooks, resolver, mode, capture)
    resolver.on_new_module = handle._check_dynamo
    try:
        if "torch._dynamo" in sys.modules:
            handle._check_dynamo()
        else:
            _DynamoImport.watch(handle)
    except BaseException:
        handle.remove()
        raise
    _installed = handle
    return handle
