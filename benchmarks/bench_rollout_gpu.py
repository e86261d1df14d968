"""Rollout tokens/s of the engine's batched llama.cpp with its layers offloaded, next to the CPU, on the bundled model.

For scripts/gpu_check.sh: the working copy (Q4_0), prompts as the node builds them (easy preset), temperature 1,
sequences stop at end-of-generation as in training. Rows: every layer on the GPU (accel.ALL_LAYERS, or
--gpu-layers) at the node's default batch (4 questions x 8) and a larger one (16 x 8), then the same default batch
on the CPU's threads for the ratio. Prints one JSON object per row; without a GPU build the "GPU" rows run on the CPU
(llama.cpp ignores the offload), and ``llama_supports_gpu_offload`` says so in the first line.

    python benchmarks/bench_rollout_gpu.py [--threads N] [--max-tokens 128] [--gpu-layers 999]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import llama_cpp

from benchmarks.bench_rollout import bench_llama, prompts_for
from engine.models.accel import ALL_LAYERS
from engine.models.modelfile import bundled_model_path
from engine.models.working_copy import working_gguf
from engine.sampling.llm import LlamaModel
from engine.sampling.rollout import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--gpu-layers", type=int, default=ALL_LAYERS)
    args = ap.parse_args()
    q4_0 = working_gguf(bundled_model_path(), "auto", Path(tempfile.mkdtemp(prefix="sapo-bench-")))
    probe = LlamaModel(q4_0, n_ctx=2048, n_seq_max=1, threads=args.threads)
    prompts = prompts_for(probe, 16)
    probe.close()
    print(json.dumps({"llama_supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
                      "llama_cpp_python": llama_cpp.__version__}), flush=True)
    params = SamplingParams(max_tokens=args.max_tokens, stop_at_answer=False)
    for where, layers, questions in (("gpu", args.gpu_layers, 4), ("gpu", args.gpu_layers, 16), ("cpu", 0, 4)):
        tps, tokens, seconds = bench_llama(q4_0, prompts[:questions], 8, params, args.threads, gpu_layers=layers)
        print(json.dumps({"where": where, "gpu_layers": layers, "questions": questions, "completions": 8,
                          "max_tokens": args.max_tokens, "tokens": tokens, "seconds": round(seconds, 2),
                          "tokens_per_s": round(tps, 1)}), flush=True)


if __name__ == "__main__":
    main()
