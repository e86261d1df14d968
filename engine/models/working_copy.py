"""The node's working GGUF: the file both llama.cpp and torch load.

On CPUs, llama.cpp repacks Q4_0 and Q8_0 weights for faster kernels but not Q4_1, so a
Q4_1 model (the bundled SmolLM2) decodes markedly faster once requantized. ``auto`` picks
the fastest format whose quality matches the source's, by measurement (docs/BENCHMARKS.md,
"Working copy by measurement"): BF16 where llama.cpp decodes on a CPU with AVX512-BF16
(its bf16 matrix products beat Q8_0's integer ones on a round's batched decoding, and bf16
keeps each Q4_1 value closer than Q8_0's blocks do), else Q8_0, which keeps the shipped
weights almost exactly at nearly Q4_0's speed. Q4_0 (a second 4-bit rounding of already
4-bit weights) decodes slightly faster but answers markedly worse, and stays available as
``weights = "q4_0"``.
The copy is cached, named by its format and the source's identity (so a Q4_0 copy from
before is never taken for the Q8_0 one), and written atomically. Torch must load this same
file so that both sides keep identical weights.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import llama_cpp as lc

from engine.errors import SapoError
from engine.models.modelfile import inspect_gguf
from engine.sampling.llm import init_backend

FTYPES = {"q4_0": lc.LLAMA_FTYPE_MOSTLY_Q4_0, "q8_0": lc.LLAMA_FTYPE_MOSTLY_Q8_0, "bf16": lc.LLAMA_FTYPE_MOSTLY_BF16}
_Q4_1 = lc.LLAMA_FTYPE_MOSTLY_Q4_1


def auto_from_q4_1(system_info: str, gpu_offload: bool) -> str:
    """The working format for a Q4_1 source, from llama.cpp's own report of what it runs on.

    BF16 only where it was measured faster (docs/BENCHMARKS.md, "Working copy by measurement"):
    llama.cpp on the CPU, built for AVX512-BF16. Elsewhere (other CPUs, a GPU) Q8_0, as measured before.
    """
    return "bf16" if not gpu_offload and "AVX512_BF16 = 1" in system_info else "q8_0"


def auto_format() -> str:
    init_backend()
    return auto_from_q4_1(lc.llama_print_system_info().decode(errors="replace"), bool(lc.llama_supports_gpu_offload()))


def file_identity(path: Path) -> str:
    """A short key for derived files: changes whenever the file is replaced or rewritten."""
    st = path.stat()
    return hashlib.sha1(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]


def source_ftype(path: Path) -> int:
    """The file type (quantization) llama.cpp reports, without loading tensors."""
    return inspect_gguf(path, require_supported=False).file_type_id  # read once, kept in the cache dir


def choose_format(path: Path, weights: str) -> str | None:
    """Which format to requantize to, or None to use the file as it is."""
    if weights == "as-is":
        return None
    if weights == "auto":
        return auto_format() if source_ftype(path) == _Q4_1 else None
    return weights


def working_gguf(source: Path, weights: str, cache_dir: Path) -> Path:
    fmt = choose_format(source, weights)
    if fmt is None:
        return source
    out = cache_dir / f"{source.stem}.{fmt}.{file_identity(source)}.gguf"
    if out.is_file():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    init_backend()
    params = lc.llama_model_quantize_default_params()
    params.ftype = FTYPES[fmt]
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    rc = lc.llama_model_quantize(str(source).encode(), str(tmp).encode(), params)
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise SapoError(f"could not convert {source.name} to {fmt} (llama.cpp error {rc})")
    os.replace(tmp, out)
    return out
