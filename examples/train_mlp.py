"""The bundled example: a small PyTorch MLP trained for a few steps under cprof.

Runs on the GPU when one is there, else on the CPU. Prints where the trace went and a short
summary of the recorded ranges. Usage:
    python examples/train_mlp.py [--steps N] [--profile-dir DIR] [--profile-name NAME] ...
(all of cprof's --profile* flags are accepted; profiling is on unless --no-profile)."""
import argparse
import sys
import time

import cprof  # before torch, so record_ops can record torch's operators (aten::*)
from cprof._summary import format_summary

import torch  # noqa: E402
from torch import nn  # noqa: E402


def build_model(width=256, depth=8):
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--no-profile", action="store_true", help="run without cprof")
    cprof.add_profiler_args(parser)
    # CPU, plus GPU where this machine can record it (as `cprof run`): a CPU-only machine gets
    # no "GPU activity was asked for" warning; --profile-activities still chooses
    if not cprof.features()["gpu_activity"]["available"]:
        parser.set_defaults(profile_activities=["CPU"])
    args = parser.parse_args(argv)
    args.profile = not args.no_profile
    if args.profile_name is None:
        args.profile_name = "train_mlp"

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = build_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 256, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    def step():
        with cprof.range("forward"):
            loss = loss_fn(model(x), y)
        with cprof.range("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with cprof.range("optimizer"):
            opt.step()
        return loss

    step()  # warm-up outside the window
    profiler = cprof.create_profiler_from_args(args)
    t0 = time.perf_counter()
    with profiler:
        for i in range(args.steps):
            with cprof.range("train_step"):
                loss = step()
        if device == "cuda":
            torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    print(f"trained {args.steps} steps on {device} in {elapsed:.3f} s, final loss "
          f"{loss.item():.4f}")
    if profiler.enabled:
        print(f"trace: {profiler.trace_path}")
        print(format_summary(profiler.summary, top=8))
    return 0


if __name__ == "__main__":
    sys.exit(main())
