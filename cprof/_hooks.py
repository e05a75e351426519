"""attach_model / attach_engine: wrap module forwards, torch.distributed collectives and engine
phase methods into bucket timers. Attaching twice never wraps twice (a marker attribute)."""
import functools
import inspect
import re
import sys
import types
import warnings

from . import _C

_MARK = "_cprof_bucket"

# (regex on the last part of the qualified name, bucket); first match wins
_NAME_RULES = [
    (r"^(embed_tokens|wte|embed|embedding|embeddings|word_embeddings|tok_embeddings)$", "embed"),
    (r"^(q_norm|k_norm|query_norm|key_norm)$", "attn.qk_norm"),
    (r"^(rotary_emb|rotary|rope|rotary_embedding|pos_emb|rotary_pos_emb)$", "attn.rope"),
    (r"^(qkv_proj|q_proj|k_proj|v_proj|query_key_value|c_attn|wqkv|wq|wk|wv|query|key|value)$",
     "attn.qkv_proj"),
    (r"^(o_proj|out_proj|wo)$", "attn.o_proj"),
    (r"^(core_attention|attn_core|sdpa|flash_attn|attention_core|attn_fn)$", "attn.compute"),
    (r"^(gate_up_proj|gate_proj|up_proj|w1|w3|w13|w1w3|fc1|c_fc|dense_h_to_4h)$",
     "mlp.gate_up_proj"),
    (r"^(act_fn|act|silu_and_mul|activation_fn)$", "mlp.silu_and_mul"),
    (r"^(down_proj|w2|fc2|dense_4h_to_h)$", "mlp.down_proj"),
    (r"^(lm_head|embed_out)$", "lm_head"),
    (r"(^|_)(norm|layernorm|ln_f|ln_1|ln_2|ln)$", "norm"),
]
_TYPE_RULES = [  # first match wins: RotaryEmbedding before the Embedding it ends with
    (r"(Rotary\w*Embedding|RotaryEmbedding\w*|RoPE)$", "attn.rope"),
    (r"Embedding$", "embed"),
    (r"(RMSNorm|LayerNorm|GroupNorm)$", "norm"),
    (r"(SiluAndMul|SiLUAndMul)$", "mlp.silu_and_mul"),
    (r"(CoreAttention|FlashAttention|ScaledDotProductAttention)$", "attn.compute"),
]
_COLLECTIVES = ("all_reduce", "reduce_scatter_tensor", "all_gather", "broadcast")
_ENGINE_METHODS = {
    "prefill": "prefill", "run_prefill": "prefill",
    "decode": "decode", "run_decode": "decode", "decode_step": "decode",
    "sample": "sampler", "sampler": "sampler", "sample_tokens": "sampler",
    "postprocess": "postproc", "postproc": "postproc", "post_process": "postproc",
    "draft": "draft", "propose": "draft",
    "verify": "verify",
    "allocate_kv": "kv.alloc", "alloc_kv": "kv.alloc", "allocate_kv_cache": "kv.alloc",
    "free_kv": "kv.free", "free_kv_cache": "kv.free",
    "copy_kv": "kv.copy", "copy_blocks": "kv.copy",
    "swap_kv": "kv.swap", "swap_in": "kv.swap", "swap_out": "kv.swap",
    "update_kv": "kv.update", "append_kv": "kv.update",
}


_CONTAINERS = ("ModuleDict", "ModuleList", "ParameterDict", "ParameterList")


def bucket_for(qualname, module, use_gated_lora=False, parent=None):
    """The model bucket of a module, by its name (the last part of its qualified path) and
    type; None if it is not a known phase. LoRA adapter modules (names containing 'lora', or
    the adapters PEFT keeps by adapter name in a ModuleDict such as `q_proj.lora_A.default`;
    parent is the module holding this one) map to '<parent bucket>.lora' when
    use_gated_lora, else are left alone."""
    parts = qualname.split(".")
    leaf = parts[-1].lower() if parts else ""
    peft = (len(parts) >= 2 and "lora" in parts[-2].lower() and parent is not None
            and type(parent).__name__ in _CONTAINERS)
    if "lora" in leaf or peft:
        if not use_gated_lora or type(module).__name__ in _CONTAINERS:
            return None
        for p in reversed(parts[:-1]):
            parent = _match_name(p.lower(), parts)
            if parent in ("attn.qkv_proj", "attn.o_proj", "mlp.gate_up_proj", "mlp.down_proj"):
                return parent + ".lora"
        return None
    b = _match_name(leaf, parts)
    if b is None:
        tname = type(module).__name__
        for pattern, bucket in _TYPE_RULES:
            if re.search(pattern, tname):
                return bucket
    return b


def _match_name(leaf, parts):
    path = ".".join(parts).lower()
    if leaf == "output":  # Llama's reference code names its head so; BERT's blocks hold
        return "lm_head" if len(parts) <= 2 else None  # `layer.N.output` modules that are not
    if leaf == "attn":  # vLLM's / SGLang's self_attn.attn (Attention, RadixAttention) is
        # the attention kernel's module; an `attn` that is a block (GPT-2's h.0.attn, timm's
        # blocks.0.attn, holding the projections) has no attention module around it
        up = parts[-2].lower() if len(parts) >= 2 else ""
        return "attn.compute" if ("attn" in up or "attention" in up) else None
    if leaf in ("c_proj", "dense"):  # GPT-2 / BERT style: meaning depends on the parent
        if "mlp" in path or "ffn" in path or "feed_forward" in path:
            return "mlp.down_proj"
        if "attn" in path or "attention" in path:
            return "attn.o_proj"
        return None
    for pattern, bucket in _NAME_RULES:
        if re.search(pattern, leaf):
            return bucket
    return None


_cpu_timer = None


def _not_compiling():
    return False


# torch.compiler.is_compiling once torch is known (attach_model / attach_engine): a wrapper
# that dynamo traces runs the method alone, since a C timer call inside a compiled graph is an
# unsupported call (a graph break per module; torch.compile(fullgraph=True) raised) and a host
# or CUDA-event region around traced code would time the tracing, not the graph
_compiling = _not_compiling


def _learn_compiling():
    global _compiling
    torch = sys.modules.get("torch")
    fn = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if callable(fn):
        _compiling = fn


def _timer(domain):
    global _cpu_timer
    if domain == 0:
        return _C.cuda_bucket_timer
    if _cpu_timer is None:
        from .runprof import cpu_bucket_timer  # strict_sync's device sync included
        _cpu_timer = cpu_bucket_timer
    return _cpu_timer


class _TimedMethod:
    """A method inside its bucket timer: a module's forward (attach_model) or an engine's
    phase method (attach_engine), set on the instance. An object holding the instance, not a
    closure over its bound method: copy.deepcopy(model) (a draft or EMA copy) gives the copy
    a wrapper that runs the copy's own method, and torch.save / pickle take it. inner: what
    the instance itself had under that name (another wrapper, a function set on it), else
    the class's method runs."""

    def __init__(self, owner, bucket, domain=0, inner=None, method="forward"):
        self.module = owner
        self.bucket = bucket
        self.domain = domain
        self.inner = inner
        self.method = method

    @property
    def __wrapped__(self):  # inspect.signature(model.forward) sees the real signature
        if self.inner is not None:
            return self.inner
        return types.MethodType(getattr(type(self.module), self.method), self.module)

    @property
    def __name__(self):
        return getattr(self.__wrapped__, "__name__", self.method)

    @property
    def __doc__(self):
        return getattr(self.__wrapped__, "__doc__", None)

    def __call__(self, *args, **kwargs):
        if _compiling():  # traced by torch.compile: the method alone (see _compiling)
            if self.inner is not None:
                return self.inner(*args, **kwargs)
            return getattr(type(self.module), self.method)(self.module, *args, **kwargs)
        with _timer(self.domain)(self.bucket):
            if self.inner is not None:
                return self.inner(*args, **kwargs)
            return getattr(type(self.module), self.method)(self.module, *args, **kwargs)

    def __repr__(self):
        return f"<cprof bucket timer {self.bucket!r} around {self.__wrapped__!r}>"


def _wrap_forward(module, bucket, domain=0):
    if getattr(module, _MARK, None) is not None:
        return False
    own = module.__dict__.get("forward")  # an instance-level forward (another wrapper)
    module.forward = _TimedMethod(module, bucket, domain, own)
    setattr(module, _MARK, bucket)
    return True


def attach_model(model, use_gated_lora=False):
    """Wraps the forward of every module with a known role into its model bucket, and the
    torch.distributed collectives into communication buckets. Returns {qualname: bucket} of
    the modules wrapped by this call (empty when already attached)."""
    if not callable(getattr(model, "named_modules", None)):
        raise TypeError(f"cprof: attach_model takes a torch.nn.Module (the model whose "
                        f"submodules are timed), got {type(model).__name__}")
    _learn_compiling()
    wrapped = {}
    by_name = dict(model.named_modules())
    for qualname, module in by_name.items():
        if not qualname:
            continue
        bucket = bucket_for(qualname, module, use_gated_lora,
                            by_name.get(qualname.rpartition(".")[0]))
        if bucket and _wrap_forward(module, bucket):
            wrapped[qualname] = bucket
    _wrap_collectives()
    return wrapped


def _wrap_collectives():
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        try:
            import torch.distributed as dist
        except ImportError:
            return
    for name in _COLLECTIVES:
        fn = getattr(dist, name, None)
        if fn is None or getattr(fn, _MARK, None) is not None:
            continue
        bucket = f"communication.{name}"

        def make(fn=fn, bucket=bucket):
            @functools.wraps(fn)
            def timed(*args, **kwargs):
                if _compiling():  # traced by torch.compile: the collective alone
                    return fn(*args, **kwargs)
                with _C.cuda_bucket_timer(bucket):
                    return fn(*args, **kwargs)

            setattr(timed, _MARK, bucket)
            return timed

        setattr(dist, name, make())


def attach_engine(engine):
    """Wraps the engine's public phase methods (prefill, decode, sample, postprocess, draft,
    verify, KV operations) into engine buckets (host clock; under strict_sync with CUDA the
    device is synchronised around them, as cpu_bucket_timer). Returns {method: bucket}."""
    if engine is None or isinstance(engine, (str, bytes, int, float, bool)):
        raise TypeError(f"cprof: attach_engine takes the engine object whose phase methods "
                        f"({', '.join(_ENGINE_METHODS)}) are timed, got {engine!r}")
    _learn_compiling()
    wrapped, found = {}, False
    for method, bucket in _ENGINE_METHODS.items():
        fn = getattr(engine, method, None)
        if fn is None or not callable(fn):
            continue
        found = True
        if isinstance(fn, _TimedMethod):  # attached already
            continue
        own = vars(engine).get(method) if hasattr(engine, "__dict__") else None
        raw = inspect.getattr_static(type(engine), method, None)
        if own is None and (raw is None or isinstance(raw, (staticmethod, classmethod))):
            # made by __getattr__, or a static / class method: called as it is fetched
            own = fn
        setattr(engine, method, _TimedMethod(engine, bucket, 1, own, method))
        wrapped[method] = bucket
    if not found:
        warnings.warn(f"cprof: attach_engine found none of the phase methods "
                      f"({', '.join(_ENGINE_METHODS)}) on {type(engine).__name__}; nothing "
                      "is timed. Time its phases with cprof.cpu_bucket_timer(bucket) instead",
                      RuntimeWarning, stacklevel=3)
    return wrapped
