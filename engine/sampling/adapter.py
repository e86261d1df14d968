"""The trained LoRA as a llama.cpp GGUF adapter, and its hot-swap into the running context.

After every update the node writes its peft LoRA in llama.cpp's adapter format and loads
it into the live context (tens of milliseconds), so the next round samples from the
updated policy without reloading the base model.

The adapter file holds, per adapted linear layer, peft's A (r, in) and B (out, r) under
llama.cpp's tensor names (``blk.N.attn_q.weight.lora_a`` / ``.lora_b``); llama.cpp adds
``B @ A @ x * alpha / r`` to that layer's output. Two details make it match torch:

- llama.cpp's HF converter reorders the rows of q and k for llama models (its rotary
  kernel wants each head's rotation pairs adjacent), and transformers' GGUF loader undoes
  that, so torch sees HF order. B of q_proj / k_proj gets the converter's row order back.
- llama.cpp has a single alpha per file, peft one scaling per module: any module whose
  scaling differs from ``alpha / r`` (rsLoRA, rank or alpha patterns) has it folded into B.

Gemma 3 needs nothing more: its converter leaves q/k rows in HF order (NEOX-style rotary),
its q/k norms act on whole heads after the projection (so a LoRA on q/k is the same on both
sides), and gguf-py's tensor map names its projections like llama's.
"""

from __future__ import annotations

import os
import time
import weakref
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.errors import SapoError

if TYPE_CHECKING:
    from peft import PeftModel

    from engine.sampling.llm import LlamaModel

# Architectures we export for, and whether llama.cpp's converter reorders their q/k rows.
# Keep in sync with engine.models.modelfile.SUPPORTED_ARCHITECTURES.
ROPE_PERMUTED: dict[str, bool] = {"llama": True, "qwen2": False, "qwen3": False, "gemma3": False}


def export_gguf_adapter(model: PeftModel, arch: str, out_path: Path, *, n_head: int | None = None,
                        n_head_kv: int | None = None) -> None:
    """Write the model's active LoRA as a llama.cpp LoRA adapter for a base of architecture ``arch``.

    ``n_head`` / ``n_head_kv`` are the base's attention and KV head counts (the GGUF's
    metadata); by default they come from the torch model's config. The file is written
    to a temporary name and renamed, so a reader never sees half a file.
    """
    import gguf

    if arch not in ROPE_PERMUTED:
        raise SapoError(f"cannot export a LoRA adapter for architecture '{arch}': "
                        f"supported are {', '.join(sorted(ROPE_PERMUTED))}")
    hf = model.get_base_model()
    cfg = hf.config
    n_head = n_head or cfg.num_attention_heads
    n_head_kv = n_head_kv or getattr(cfg, "num_key_value_heads", None) or n_head
    layers = _lora_layers(model)
    if not layers:
        raise SapoError("the model has no LoRA layers to export")

    # One alpha for the file: the first module's effective alpha (scaling * r).
    first = layers[0]
    alpha = float(first[2] * first[1].shape[0])  # 0 makes llama.cpp use a scale of 1
    out_path = Path(out_path)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(tmp, arch)  # also writes general.architecture
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    for hf_name, a, scaling, b in layers:
        target = _gguf_name(arch, cfg.num_hidden_layers, hf_name)
        llama_scale = alpha / a.shape[0] if alpha else 1.0
        factor = scaling / llama_scale
        b_np = b.numpy()
        if ROPE_PERMUTED[arch] and target.endswith((".attn_q", ".attn_k")):
            heads = n_head if target.endswith(".attn_q") else n_head_kv
            if b_np.shape[0] % (2 * heads):
                raise SapoError(f"{hf_name}: {b_np.shape[0]} output rows do not split into {heads} heads")
            b_np = b_np[_rope_row_order(b_np.shape[0], heads)]
        if abs(factor - 1.0) > 1e-6:
            b_np = b_np * b_np.dtype.type(factor)
        writer.add_tensor(f"{target}.weight.lora_a", a.numpy())
        writer.add_tensor(f"{target}.weight.lora_b", np.ascontiguousarray(b_np))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        _write_tensor_data(writer)
        writer.close()
        os.replace(tmp, out_path)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise


def _write_tensor_data(writer) -> None:
    """The data section GGUFWriter.write_tensors_to_file would write, in a few syscalls.

    The writer's ``tofile`` per tensor costs about 30 us each on top of the copy (numpy dups
    the file handle every call); 400+ tensors made that most of the export time.
    """
    fout = writer.fout[0]
    writer.write_padding(fout, fout.tell())
    fout.flush()
    align = writer.data_alignment
    chunks: list[memoryview] = []
    for info in writer.tensors[0].values():  # insertion order = the offsets in the header
        chunks.append(memoryview(info.tensor).cast("B"))
        pad = -info.nbytes % align
        if pad:
            chunks.append(memoryview(bytes(pad)))
    _write_all(fout, chunks)


def _write_all(fout, chunks: list[memoryview]) -> None:
    if not hasattr(os, "writev"):  # Windows
        for chunk in chunks:
            fout.write(chunk)
        return
    fd = fout.fileno()
    iov_max = 1024
    i = 0
    while i < len(chunks):
        try:
            written = os.writev(fd, chunks[i:i + iov_max])
        except OSError as exc:  # name the file: a full disk's message then says where
            raise OSError(exc.errno, exc.strerror, getattr(fout, "name", None)) from exc
        if written <= 0:
            raise OSError("could not write the LoRA adapter file (disk full?)")
        while written and i < len(chunks):  # a short write leaves a partial chunk to resend
            if written >= len(chunks[i]):
                written -= len(chunks[i])
                i += 1
            else:
                chunks[i] = chunks[i][written:]
                written = 0


def _lora_layers(model: PeftModel) -> list[tuple[str, torch.Tensor, float, torch.Tensor]]:
    """(HF module name, A, scaling, B) for every adapted linear layer, A and B as fp32 CPU tensors."""
    name = model.active_adapter
    out = []
    for module_name, module in _lora_modules(model, name):
        # A no-op for fp32 weights: no copy before writing.
        a = module.lora_A[name].weight.detach().float().cpu().contiguous()
        b = module.lora_B[name].weight.detach().float().cpu().contiguous()
        out.append((module_name, a, float(module.scaling[name]), b))
    return out


# Walking a model's modules costs milliseconds per export, so the LoRA layers are found once per model.
_module_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _lora_modules(model: PeftModel, name: str) -> list[tuple[str, torch.nn.Module]]:
    from peft.tuners.lora import LoraLayer

    key = (name, id(model.peft_config[name]))  # an adapter deleted and re-added gets a new config
    cached = _module_cache.get(model)
    if cached is not None and cached[0] == key:
        return cached[1]
    found = []
    for module_name, module in model.get_base_model().named_modules():
        if not isinstance(module, LoraLayer):
            continue
        if name in getattr(module, "lora_embedding_A", {}):
            raise SapoError(f"{module_name}: LoRA on embeddings cannot be exported to llama.cpp")
        if name not in module.lora_A:
            continue
        if module.use_dora.get(name, False):
            raise SapoError(f"{module_name}: DoRA adapters cannot be exported to llama.cpp")
        if getattr(module, "lora_bias", {}).get(name, False):
            raise SapoError(f"{module_name}: LoRA with a bias cannot be exported to llama.cpp")
        if module.lora_A[name].weight.dim() != 2:
            raise SapoError(f"{module_name}: only LoRA on linear layers can be exported to llama.cpp")
        found.append((module_name, module))
    _module_cache[model] = (key, found)
    return found


@lru_cache(maxsize=8)
def _tensor_map(arch: str, n_layers: int):
    import gguf

    arch_enum = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    return gguf.get_tensor_name_map(arch_enum, n_layers)  # slow to build: cached


@lru_cache(maxsize=4096)
def _gguf_name(arch: str, n_layers: int, hf_name: str) -> str:
    """llama.cpp's tensor name (without ``.weight``) of an HF module, e.g. ``blk.3.attn_q``."""
    target = _tensor_map(arch, n_layers).get_name(hf_name)
    if target is None or target.startswith("token_embd"):
        raise SapoError(f"no llama.cpp tensor for the LoRA target '{hf_name}' ({arch})")
    return target


@lru_cache(maxsize=16)
def _rope_row_order(n_rows: int, n_heads: int) -> np.ndarray:
    """Indices such that ``w[order]`` puts HF-ordered q/k rows into llama.cpp's order.

    HF stores each head's rotary dimensions as (first halves..., second halves...); the
    converter interleaves them: its row ``h*d + 2*j + s`` is HF row ``h*d + s*d/2 + j``.
    """
    half = n_rows // n_heads // 2
    return np.arange(n_rows).reshape(n_heads, 2, half).transpose(0, 2, 1).reshape(-1)


class AdapterSync:
    """Exports the LoRA after each update and hot-swaps it into a running ``LlamaModel``.

    Files alternate between two names in ``adapters_dir``, so the file behind the active
    adapter is never rewritten; the previous file is deleted once the new one is live.
    """

    def __init__(self, llm: LlamaModel, adapters_dir: Path, arch: str, *, n_head: int | None = None,
                 n_head_kv: int | None = None) -> None:
        if arch not in ROPE_PERMUTED:
            raise SapoError(f"cannot hot-swap LoRA adapters for architecture '{arch}': "
                            f"supported are {', '.join(sorted(ROPE_PERMUTED))}")
        self.llm = llm
        self.dir = Path(adapters_dir)
        self.arch = arch
        self.n_head = n_head
        self.n_head_kv = n_head_kv
        self.current: Path | None = None  # the file behind llama.cpp's active adapter
        self.dir.mkdir(parents=True, exist_ok=True)

    def sync(self, model: PeftModel) -> float:
        """Export ``model``'s LoRA and make it llama.cpp's active adapter; returns milliseconds taken
        (export, load and swap together)."""
        t0 = time.perf_counter()
        slots = (self.dir / "lora-a.gguf", self.dir / "lora-b.gguf")
        path = slots[1] if self.current == slots[0] else slots[0]
        export_gguf_adapter(model, self.arch, path, n_head=self.n_head, n_head_kv=self.n_head_kv)
        try:
            self.llm.swap_adapter(path)  # on failure the old adapter stays active
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        old, self.current = self.current, path
        if old is not None and old != path:
            old.unlink(missing_ok=True)
        return (time.perf_counter() - t0) * 1000.0
