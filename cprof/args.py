"""Command-line flags of seed 000: add_profiler_args / create_profiler_from_args."""
import argparse
import collections.abc

from ._window import FALSE_WORDS, is_settings
from .context import VALID_ACTIVITIES, ProfilerContext


def _activity(value):
    """An activity name as the flag takes it: any case; CUDA is GPU (torch.profiler's name)."""
    v = str(value).upper()
    return "GPU" if v == "CUDA" else v


def add_profiler_args(parser):
    """Adds --profile, --profile-dir, --profile-name, --profile-activities,
    --profile-with-stack / --no-profile-with-stack, --profile-record-shapes /
    --no-profile-record-shapes, --profile-record-ops / --no-profile-record-ops and
    --track-memory to an argparse parser (or group).
    A flag the parser already has (a program's own --track-memory, say) is left as it is and
    create_profiler_from_args reads the program's value. Returns the parser."""
    group = parser.add_argument_group("cprof profiling") if hasattr(
        parser, "add_argument_group") else parser
    taken = getattr(parser, "_option_string_actions", {})

    def add(flag, *more, **kw):
        if flag in taken or any(m in taken for m in more):
            return
        group.add_argument(flag, *more, **kw)

    add("--profile", action="store_true", default=False,
        help="profile this run with cprof and write a trace")
    add("--profile-dir", type=str, default=None,
        help="trace directory (default: $CPROF_PROFILER_DIR, else $CPROF_TORCH_PROFILER_DIR, "
             "else /tmp/cprof_profiles; read when the profiler is made)")
    add("--profile-name", type=str, default=None,
        help="trace file name prefix (default: profile_<unix seconds>; under torchrun the "
             "same in every rank: see docs/usage.md)")
    add("--profile-activities", nargs="+", type=_activity, choices=list(VALID_ACTIVITIES),
        default=["CPU", "GPU"], metavar="{CPU,GPU,MEM}",
        help="what to record: CPU, GPU (or CUDA), MEM (default: CPU GPU)")
    add("--profile-with-stack", action=argparse.BooleanOptionalAction, default=True,
        help="record Python stacks (default: on)")
    add("--profile-record-shapes", action=argparse.BooleanOptionalAction, default=True,
        help="record tensor shapes (default: on)")
    add("--profile-record-ops", action=argparse.BooleanOptionalAction, default=False,
        help="record torch's operators (aten::mm, autograd nodes) as cpu_op ranges, as "
             "torch.profiler's CPU activity does (default: off; kernels then link to them)")
    add("--track-memory", action="store_true", default=False,
        help="track memory (adds MEM to the activities)")
    return parser


def _arg_flag(value):
    """A flag's value as a namespace or config holds it: a bool or number as it is, the words
    YAML or an environment variable leave ("false", "no", "0", "off": False; bool() would take
    them as true), and any other value given (a program's own --profile PATH) as on."""
    if isinstance(value, str):
        return value.strip().lower() not in FALSE_WORDS
    return bool(value)


def create_profiler_from_args(args, profile_name=None):
    """Returns a ProfilerContext configured from parsed arguments: an argparse namespace (or
    any object with those attributes) or a mapping of the same names (`vars(args)`, a config
    dict). Disabled (a no-op) when --profile is absent. An explicit profile_name wins over
    --profile-name. Names that args lacks take their defaults."""
    if args is None:
        raise TypeError("cprof.create_profiler_from_args: args is None; pass the parsed arguments (parser.parse_args()) "
                        "or a dict of them")
    if not isinstance(args, collections.abc.Mapping) and not is_settings(args):
        raise TypeError(f"cprof.create_profiler_from_args: args must be the parsed arguments "
                        f"(parser.parse_args(), or any object with them as attributes) or a "
                        f"dict of them, got {type(args).__name__} {args!r:.60}")
    if isinstance(args, collections.abc.Mapping):
        def get(name, default):
            value = args.get(name, default)
            return default if value is None and default is not None else value
    else:
        def get(name, default):
            return getattr(args, name, default)
    enabled = _arg_flag(get("profile", False))
    activities = get("profile_activities", None) or ["CPU", "GPU"]
    if isinstance(activities, str):
        activities = [activities]
    activities = list(activities)
    if _arg_flag(get("track_memory", False)) and not any(
            str(a).upper() == "MEM" for a in activities):
        activities.append("MEM")
    return ProfilerContext(
        enabled=enabled,
        activities=activities,
        output_dir=get("profile_dir", None),
        profile_name=profile_name or get("profile_name", None),
        with_stack=_arg_flag(get("profile_with_stack", True)),
        record_shapes=_arg_flag(get("profile_record_shapes", True)),
        record_ops=_arg_flag(get("profile_record_ops", False)),
    )
