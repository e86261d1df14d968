"""Does ``torch.compile`` shorten an experiment round's training step? Plain and compiled steps side by side.

    python benchmarks/bench_compile.py [--what mlp+norm|layer] [--pairs 4] [--threads 1]

The work of benchmarks/profile_step.py (4 real groups of L = 4, <= 48 tokens, the second two as peers' under
``drop``, the bundled model, the engine's automatic dtype, one thread as experiment workers run). One process,
one trainer; the compiled and the plain modules are swapped in and out, so the two take turns on the same
weights and groups (``--pairs`` turns; the fastest of each counts). What is compiled (``dynamic=True``, as group
lengths change every step):
- ``mlp+norm``: each decoder layer's MLP (with its LoRA adapters) and its two RMS norms: the small elementwise
  operations around the matrix products, where profile_step.py found a third of the step;
- ``layer``: each decoder layer's whole forward (the attention reads the shared prompt beginnings' keys/values
  from the trainer's cache object, which dynamo guards on per layer).
For issue 22: the lever profile_step.py left untried.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _swap_inner_forward(layer: object, forward: object) -> None:
    """Point the trainer's per-layer checkpointing wrapper (``_checkpointable``) at ``forward``."""
    wrapper = layer.forward  # type: ignore[attr-defined]
    cell = wrapper.__closure__[wrapper.__code__.co_freevars.index("forward")]
    cell.cell_contents = forward


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", choices=("mlp+norm", "layer"), default="mlp+norm")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--recompile-limit", type=int, default=None,
                    help="dynamo's recompiles per function (its default, 8, leaves most layers eager under `layer`: "
                         "each layer's cache index is a guard)")
    ap.add_argument("--cache", type=Path, default=Path(os.environ.get("SAPO_CACHE_DIR") or
                                                      Path(tempfile.gettempdir()) / "sapo-bench-cache"))
    args = ap.parse_args()

    import torch

    if args.recompile_limit is not None:
        torch._dynamo.config.recompile_limit = args.recompile_limit
        torch._dynamo.config.accumulated_recompile_limit = max(256, 4 * args.recompile_limit)

    from profile_step import experiment_step

    trainer, groups, dtype = experiment_step(args.cache, threads=args.threads)
    layers = trainer.layers
    if args.what == "layer":
        plain = [layer.forward.__closure__[layer.forward.__code__.co_freevars.index("forward")].cell_contents
                 for layer in layers]
        compiled = [torch.compile(f, dynamic=True) for f in plain]

        def use(which: str) -> None:
            for layer, f in zip(layers, plain if which == "plain" else compiled):
                _swap_inner_forward(layer, f)
    else:
        parts = ("mlp", "input_layernorm", "post_attention_layernorm")
        plain_m = [{p: getattr(layer, p) for p in parts} for layer in layers]
        compiled_m = [{p: torch.compile(m, dynamic=True) for p, m in d.items()} for d in plain_m]

        def use(which: str) -> None:
            for layer, d in zip(layers, plain_m if which == "plain" else compiled_m):
                for p, m in d.items():
                    setattr(layer, p, m)

    trainer.step(groups[:1])  # first-call costs
    use("compiled")
    t0 = time.perf_counter()
    trainer.step(groups)
    print(f"first compiled step (compiling): {time.perf_counter() - t0:.1f} s", flush=True)
    times: dict[str, list[float]] = {"plain": [], "compiled": []}
    for _ in range(args.pairs):
        for which in times:
            use(which)
            t0 = time.perf_counter()
            trainer.step(groups)
            times[which].append(time.perf_counter() - t0)
    print(json.dumps({"what": args.what, "recompile_limit": torch._dynamo.config.recompile_limit, "dtype": str(dtype).removeprefix("torch."), "threads": args.threads,
                      **{k: [round(t, 2) for t in v] for k, v in times.items()},
                      "fastest": {k: round(min(v), 2) for k, v in times.items()},
                      "compiled_speedup": round(min(times["plain"]) / min(times["compiled"]), 3)}))


if __name__ == "__main__":
    main()
