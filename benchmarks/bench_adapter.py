"""LoRA hot-swap cost against a full llama.cpp model reload, on the bundled model.

Prints, side by side (medians): writing the adapter GGUF, loading + swapping it into a
running context, the two together as the round loop pays them (AdapterSync.sync), and
constructing a fresh LlamaModel, which is what a node without hot-swap would pay.

    .venv/bin/python benchmarks/bench_adapter.py [--rank 16] [--repeats 20] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from engine.sampling.adapter import AdapterSync, export_gguf_adapter  # noqa: E402
from engine.sampling.llm import LlamaModel  # noqa: E402
from engine.models.modelfile import bundled_model_path, inspect_gguf  # noqa: E402
from engine.learning.policy import attach_lora, load_base, lora_config  # noqa: E402
from engine.models.working_copy import working_gguf  # noqa: E402

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def median_ms(fn, repeats: int) -> float:
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--reloads", type=int, default=5, help="full model reloads to time (each takes a while)")
    ap.add_argument("--threads", type=int, default=1, help="torch and llama.cpp threads")
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--n-seq", type=int, default=16)
    ap.add_argument("--cache-dir", type=Path, help="keep the Q4_0 copy and torch weights here between runs")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cache = args.cache_dir or tmp / "cache"
        gguf_path = working_gguf(bundled_model_path(), "auto", cache)
        info = inspect_gguf(gguf_path)
        torch.manual_seed(0)
        model = attach_lora(load_base(gguf_path, cache), lora_config(args.rank, 2 * args.rank, 0.0, ALL_LINEAR))
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.01)  # a trained-looking adapter, not all zeros
        n_lora = sum(p.numel() for p in model.parameters() if p.requires_grad)

        def new_llm() -> LlamaModel:
            return LlamaModel(gguf_path, n_ctx=args.n_ctx, n_seq_max=args.n_seq, threads=args.threads)

        llm = new_llm()
        out = tmp / "adapters"
        out.mkdir()
        kw = dict(n_head=info.n_head, n_head_kv=info.n_head_kv)

        def export(i: int) -> None:  # fresh names, as AdapterSync writes them
            export_gguf_adapter(model, info.architecture, out / f"x{i}.gguf", **kw)
            (out / f"x{i - 1}.gguf").unlink(missing_ok=True)

        export_ms = median_ms(export, args.repeats)
        size = (out / f"x{args.repeats - 1}.gguf").stat().st_size
        paths = [out / "s0.gguf", out / "s1.gguf"]
        for p in paths:
            export_gguf_adapter(model, info.architecture, p, **kw)
        swap_ms = median_ms(lambda i: llm.swap_adapter(paths[i % 2]), args.repeats)
        sync = AdapterSync(llm, tmp / "sync", info.architecture, **kw)
        sync_ms = median_ms(lambda i: sync.sync(model), args.repeats)
        llm.close()

        def reload(i: int) -> None:
            new_llm().close()

        reload_ms = median_ms(reload, args.reloads)

    print(f"{info.name} ({info.file_type}, {info.architecture}), LoRA r={args.rank} on {len(ALL_LINEAR)} linear "
          f"types: {n_lora / 1e6:.2f} M params, adapter file {size / 2**20:.1f} MiB; threads {args.threads}")
    print(f"{'export':>10} {'load+swap':>10} {'sync':>10} {'reload':>10}   (ms, median of {args.repeats}; "
          f"reload of {args.reloads}, n_ctx {args.n_ctx}, n_seq {args.n_seq})")
    print(f"{export_ms:10.1f} {swap_ms:10.1f} {sync_ms:10.1f} {reload_ms:10.1f}")


if __name__ == "__main__":
    main()
