"""The models a volunteer can pick, and how much memory each needs.

Every entry is one GGUF file that serves both sides of a node: llama.cpp samples from it
(rollout) and torch trains a LoRA on transformers' dequantized copy (training). Memory
needs come from one small formula (`memory_needs`) over the model's shape, so that a local
GGUF file the user brings gets the same treatment as a catalog entry. The bundled 135M
model's figures are measured on this project's reference machine instead.

The formula (all sizes in bytes; P = parameters, L = layers, E = hidden size, F = FFN
width, V = vocab, KV = kv heads x head dim, d = training dtype bytes):

  rollout   = file size (weights, mmapped)                                   llama.cpp
            + 2 (K,V) x L x KV x 2 bytes (f16) x ROLLOUT_SEQS x ROLLOUT_CTX  KV cache
            + UBATCH x (V + 2F + 4E) x 4 bytes                               compute buffer
            + LLAMA_RUNTIME
  train     = TORCH_RUNTIME + max(load peak, steady step)                    torch
    load peak   = P x (4 + d)   transformers dequantizes the GGUF into an fp32 state dict
                                before the model holds it in dtype d (measured 1.75 x 4P
                                for the 135M in fp32; 2 x 4P keeps a margin)
    steady step = P x d                                      frozen base
                + LoRA params x 16                           fp32 weight, grad, Adam m and v
                + B x T x E x d x L                          checkpointed layer inputs
                + B x T x (4E + 3F) x d x 2                  one layer recomputed, fwd + grad
                + B x H x T x T x d                          attention scores (math SDPA)
                + LOGPROB_CHUNK x V x 4 x 3                  one chunk of fp32 logits,
                                                             log-softmax and its grad
  with d = 4 (fp32) on CPU and 2 (bf16) on a GPU; on a GPU the load peak is host RAM and
  the steady step (plus CUDA_CONTEXT) is GPU memory.

The trainer must compute target log-probs in chunks, recomputing each chunk in backward
(no full-vocab logits for the batch); the figures assume it does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from engine.models.modelfile import GGUFInfo

GiB = 1024**3
MiB = 1024**2

# Workload the figures are sized for: one round's rollout batch and one training micro-batch.
ROLLOUT_SEQS = 8  # completions per round batch
ROLLOUT_CTX = 1024  # tokens per completion incl. prompt
LLAMA_UBATCH = 512  # llama.cpp's default physical batch
LLAMA_RUNTIME = 150 * MiB  # llama.cpp + Python process, without the model
TRAIN_MICRO_BATCH = 4  # sequences per micro-batch
TRAIN_SEQ = 1024  # tokens per sequence
LORA_RANK = 16  # on all linear layers of every block
LOGPROB_CHUNK = 256  # tokens per chunk of target log-probs
TORCH_RUNTIME = 260 * MiB  # measured: RSS of python + torch + transformers after import
CUDA_CONTEXT = 500 * MiB  # CUDA context + cuBLAS workspaces on the GPU

Device = Literal["cpu", "cuda", "mps"]
Source = Literal["bundled", "hub", "local"]


@dataclass(frozen=True)
class ModelShape:
    """The numbers the memory formula needs; from the model's config or its GGUF."""

    n_params: int
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    vocab_size: int

    def lora_params(self, rank: int = LORA_RANK) -> int:
        """Trainable parameters of a rank-r LoRA on q, k, v, o, gate, up and down."""
        e, f = self.n_embd, self.n_ff
        q, kv = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        per_layer = (e + q) + 2 * (e + kv) + (q + e) + 2 * (e + f) + (f + e)
        return rank * per_layer * self.n_layers

    def estimated_params(self, tied_embeddings: bool = True) -> int:
        """Parameter count implied by the shape (norms and biases ignored): a typo check."""
        e, f = self.n_embd, self.n_ff
        q, kv = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        per_layer = e * q + 2 * e * kv + q * e + 3 * e * f
        emb = self.vocab_size * e * (1 if tied_embeddings else 2)
        return per_layer * self.n_layers + emb


@dataclass(frozen=True)
class MemoryNeeds:
    """Bytes one node needs for this model on one kind of device."""

    device: Device
    rollout_bytes: int  # llama.cpp: weights + KV cache for a round's batch + buffers
    train_bytes: int  # torch training (on the GPU for cuda/mps; in RAM for cpu)
    load_ram_bytes: int  # host RAM peak while transformers dequantizes the GGUF
    basis: str  # "estimated", or what was measured

    @property
    def total_bytes(self) -> int:
        """Both sides at once on the same memory (CPU RAM, one GPU, or unified memory)."""
        if self.device == "cuda":
            return self.rollout_bytes + self.train_bytes
        return self.rollout_bytes + max(self.train_bytes, self.load_ram_bytes)


@dataclass(frozen=True)
class Measured:
    """Figures measured on a real CPU run; they replace the formula's where given (CPU only)."""

    rollout_bytes: int | None = None
    train_cpu_bytes: int | None = None
    load_ram_cpu_bytes: int | None = None
    how: str = ""


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # short, lower-case, what users type: "qwen2.5-0.5b"
    display_name: str
    repo_id: str | None  # Hugging Face repo; None for bundled and local files
    filename: str
    quantization: str
    architecture: str
    n_params: int
    file_size_bytes: int  # as published (rounded for some); the download has the exact size
    shape: ModelShape
    source: Source = "hub"
    tied_embeddings: bool = True
    local_path: Path | None = None  # for source == "local"
    measured: Measured | None = None
    # False for models under terms the user accepts by choosing them (Gemma): never picked
    # automatically, only when named.
    auto_pick: bool = True
    licence: str = ""  # shown to the user where it is not a plain open licence

    @property
    def bundled(self) -> bool:
        return self.source == "bundled"

    def memory(self, device: Device) -> MemoryNeeds:
        return memory_needs(self.shape, self.file_size_bytes, device, self.measured)


def rollout_bytes(shape: ModelShape, file_size: int) -> int:
    kv = 2 * shape.n_layers * shape.n_head_kv * shape.head_dim * 2 * ROLLOUT_SEQS * ROLLOUT_CTX
    compute = LLAMA_UBATCH * (shape.vocab_size + 2 * shape.n_ff + 4 * shape.n_embd) * 4
    return file_size + kv + compute + LLAMA_RUNTIME


def train_step_bytes(shape: ModelShape, dtype_bytes: int) -> int:
    """Steady-state bytes of one LoRA training step (frozen base + LoRA state + activations)."""
    b, t, d = TRAIN_MICRO_BATCH, TRAIN_SEQ, dtype_bytes
    base = shape.n_params * d
    lora = shape.lora_params() * 16
    checkpoints = b * t * shape.n_embd * d * shape.n_layers
    one_layer = b * t * (4 * shape.n_embd + 3 * shape.n_ff) * d * 2
    attention = b * shape.n_head * t * t * d
    logprobs = LOGPROB_CHUNK * shape.vocab_size * 4 * 3
    return base + lora + checkpoints + one_layer + attention + logprobs


def load_peak_bytes(shape: ModelShape, dtype_bytes: int) -> int:
    return TORCH_RUNTIME + shape.n_params * (4 + dtype_bytes)


def memory_needs(shape: ModelShape, file_size: int, device: Device, measured: Measured | None = None) -> MemoryNeeds:
    dtype_bytes = 4 if device == "cpu" else 2
    rollout = rollout_bytes(shape, file_size)
    step = train_step_bytes(shape, dtype_bytes)
    train = step + (CUDA_CONTEXT if device == "cuda" else TORCH_RUNTIME)
    load = load_peak_bytes(shape, dtype_bytes)
    basis = "estimated"
    if measured is not None:
        parts = []
        if device == "cpu" and measured.rollout_bytes is not None:
            rollout, parts = measured.rollout_bytes, parts + ["rollout"]
        if device == "cpu" and measured.train_cpu_bytes is not None:
            train, parts = measured.train_cpu_bytes, parts + ["training"]
        if device == "cpu" and measured.load_ram_cpu_bytes is not None:
            load, parts = measured.load_ram_cpu_bytes, parts + ["load"]
        if parts:
            basis = f"measured ({', '.join(parts)})" + ("" if len(parts) == 3 else ", rest estimated")
    return MemoryNeeds(device, rollout, train, load, basis)


def entry_from_gguf(info: GGUFInfo) -> CatalogEntry:
    """A catalog-like entry for a local GGUF file, so it goes through the same checks."""
    shape = ModelShape(
        n_params=info.n_params,
        n_layers=info.n_layers,
        n_embd=info.n_embd,
        n_head=info.n_head,
        n_head_kv=info.n_head_kv,
        head_dim=info.head_dim,
        n_ff=info.n_ff or 4 * info.n_embd,
        vocab_size=info.vocab_size,
    )
    return CatalogEntry(
        name=info.path.stem.lower(),
        display_name=f"{info.name} (local file)",
        repo_id=None,
        filename=info.path.name,
        quantization=info.file_type,
        architecture=info.architecture,
        n_params=info.n_params,
        file_size_bytes=info.size_bytes,
        shape=shape,
        source="local",
        local_path=info.path,
    )


def _shape(p: int, layers: int, embd: int, heads: int, kv: int, hd: int, ff: int, vocab: int) -> ModelShape:
    return ModelShape(p, layers, embd, heads, kv, hd, ff, vocab)


# Bundled 135M, measured on the 2-core reference box (torch 2.13 CPU, transformers 5.24,
# peft 0.21, llama-cpp-python 0.3.36), peak RSS (ru_maxrss) of the whole process:
# - rollout: engine.sampling.llm.LlamaModel on the working copy, n_ctx 8192, 8 sequences, every KV
#   cell filled with a 1k-token prompt: 550 MB on the BF16 copy (auto on CPUs with AVX512-BF16, the
#   largest auto picks; 2026-12-05), 423 MB on the Q8_0 copy, 377 MB (387 MB before) on the Q4_1 file.
# - load: AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32): 1,201 MB.
# - training: LoRA r 16 on all linear layers, micro-batch 4 x 1024 tokens, gradient
#   checkpointing, 256-token log-prob chunks recomputed in backward, one AdamW step:
#   1,532 MB with glibc's mmap threshold fixed at 1 MiB (see hardware.tune_allocator);
#   5,374 MB with glibc defaults, whose heap keeps freed activations: 3.5 x the need.
_BUNDLED_MEASURED = Measured(
    rollout_bytes=549_855_232,
    train_cpu_bytes=1_531_965_440,
    load_ram_cpu_bytes=1_202_245_632,
    how="peak RSS on the 2-core reference box; training with the allocator tuned",
)

# Shapes are from each model's config.json; n_params is the GGUF tensor total (tied
# embeddings stored once). File sizes as listed on the Hub. Memory needs: estimated by the
# formula, except what was measured (the bundled model; Gemma 3 270M's training and load).
# Gemma 3: shapes and n_params are those of the real 270M file (tests/test_gemma.py) and the
# 1B config; their 262,144-token vocabulary makes the log-prob chunks (and so training
# memory) larger than a model of the same size with a 49k or 152k vocabulary would need.
_GEMMA_TERMS = "Gemma Terms of Use (ai.google.dev/gemma/terms), accepted by choosing the model"
# Gemma 3 270M, measured on the same box (torch 2.13 CPU, transformers 5.24, peft 0.21) with the
# test fixture, the base model's Q4_K_M file (same shape as the instruct Q8_0 entry; torch holds
# both in fp32), peak RSS of the whole process, while other jobs loaded the machine:
# - load: AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32): 3,310 MB,
#   0.9 GB over the formula (not traced; the 670 MB fp32 embedding is the likely extra copy);
# - training: LoRA r 16 on all linear layers, one micro-batch of 4 x 1024 tokens (64 prompt +
#   960 completion), gradient checkpointing, 256-token log-prob chunks, one AdamW step, the
#   allocator tuned: 2,591 MB (formula: 2,752 MB). Measured with the trainer as it was then
#   (always checkpointing, one sequence per completion), before the shared-prefix trainer.
# Rollout stays estimated (it depends on the file, and the entry's file is the Q8_0 one).
_GEMMA_270M_MEASURED = Measured(
    train_cpu_bytes=2_591_191_040,
    load_ram_cpu_bytes=3_309_871_104,
    how="peak RSS on the 2-core reference box, base Q4_K_M file of the same shape; rollout estimated",
)
CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        "smollm2-135m", "SmolLM2 135M Instruct (bundled)", None, "SmolLM2-135M-Instruct.Q4_1.gguf",
        "Q4_1", "llama", 134_515_008, 98_362_432,
        _shape(134_515_008, 30, 576, 9, 3, 64, 1536, 49152), source="bundled", measured=_BUNDLED_MEASURED,
    ),
    CatalogEntry(
        "gemma3-270m", "Gemma 3 270M Instruct", "ggml-org/gemma-3-270m-it-GGUF",
        "gemma-3-270m-it-Q8_0.gguf", "Q8_0", "gemma3", 268_098_176, 291_545_600,
        _shape(268_098_176, 18, 640, 4, 1, 256, 2048, 262144), auto_pick=False, licence=_GEMMA_TERMS,
        measured=_GEMMA_270M_MEASURED,
    ),
    CatalogEntry(
        "smollm2-360m", "SmolLM2 360M Instruct", "HuggingFaceTB/SmolLM2-360M-Instruct-GGUF",
        "smollm2-360m-instruct-q8_0.gguf", "Q8_0", "llama", 361_821_120, 386_404_992,
        _shape(361_821_120, 32, 960, 15, 5, 64, 2560, 49152),
    ),
    CatalogEntry(
        "qwen2.5-0.5b", "Qwen2.5 0.5B Instruct", "Qwen/Qwen2.5-0.5B-Instruct-GGUF",
        "qwen2.5-0.5b-instruct-q8_0.gguf", "Q8_0", "qwen2", 494_032_768, 675_710_816,
        _shape(494_032_768, 24, 896, 14, 2, 64, 4864, 151936),
    ),
    CatalogEntry(
        "qwen3-0.6b", "Qwen3 0.6B", "Qwen/Qwen3-0.6B-GGUF", "Qwen3-0.6B-Q8_0.gguf",
        "Q8_0", "qwen3", 596_049_920, 639_446_688,
        _shape(596_049_920, 28, 1024, 16, 8, 128, 3072, 151936),
    ),
    CatalogEntry(  # file size as listed (1.07 GB), rounded: the download has the exact size
        "gemma3-1b", "Gemma 3 1B Instruct", "ggml-org/gemma-3-1b-it-GGUF",
        "gemma-3-1b-it-Q8_0.gguf", "Q8_0", "gemma3", 999_885_952, 1_070_000_000,
        _shape(999_885_952, 26, 1152, 4, 1, 256, 6912, 262144), auto_pick=False, licence=_GEMMA_TERMS,
    ),
    CatalogEntry(
        "llama3.2-1b", "Llama 3.2 1B Instruct", "bartowski/Llama-3.2-1B-Instruct-GGUF",
        "Llama-3.2-1B-Instruct-Q8_0.gguf", "Q8_0", "llama", 1_235_814_400, 1_321_082_528,
        _shape(1_235_814_400, 16, 2048, 32, 8, 64, 8192, 128256),
    ),
    CatalogEntry(
        "qwen2.5-1.5b", "Qwen2.5 1.5B Instruct", "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
        "qwen2.5-1.5b-instruct-q4_k_m.gguf", "Q4_K_M", "qwen2", 1_543_714_304, 1_117_320_736,
        _shape(1_543_714_304, 28, 1536, 12, 2, 128, 8960, 151936),
    ),
    CatalogEntry(
        "smollm2-1.7b", "SmolLM2 1.7B Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF",
        "smollm2-1.7b-instruct-q4_k_m.gguf", "Q4_K_M", "llama", 1_711_376_384, 1_055_609_824,
        _shape(1_711_376_384, 24, 2048, 32, 32, 64, 8192, 49152),
    ),
    CatalogEntry(
        "qwen3-1.7b", "Qwen3 1.7B", "Qwen/Qwen3-1.7B-GGUF", "Qwen3-1.7B-Q8_0.gguf",
        "Q8_0", "qwen3", 1_720_574_976, 1_834_426_016,
        _shape(1_720_574_976, 28, 2048, 16, 8, 128, 6144, 151936),
    ),
    CatalogEntry(
        "qwen2.5-3b", "Qwen2.5 3B Instruct", "Qwen/Qwen2.5-3B-Instruct-GGUF",
        "qwen2.5-3b-instruct-q4_k_m.gguf", "Q4_K_M", "qwen2", 3_085_938_688, 2_104_932_768,
        _shape(3_085_938_688, 36, 2048, 16, 2, 128, 11008, 151936),
    ),
    CatalogEntry(
        "llama3.2-3b", "Llama 3.2 3B Instruct", "bartowski/Llama-3.2-3B-Instruct-GGUF",
        "Llama-3.2-3B-Instruct-Q4_K_M.gguf", "Q4_K_M", "llama", 3_212_749_824, 2_019_377_696,
        _shape(3_212_749_824, 28, 3072, 24, 8, 128, 8192, 128256),
    ),
    CatalogEntry(
        "qwen3-4b", "Qwen3 4B", "Qwen/Qwen3-4B-GGUF", "Qwen3-4B-Q4_K_M.gguf",
        "Q4_K_M", "qwen3", 4_022_468_096, 2_497_280_256,
        _shape(4_022_468_096, 36, 2560, 32, 8, 128, 9728, 151936),
    ),
    CatalogEntry(
        "qwen2.5-7b", "Qwen2.5 7B Instruct", "bartowski/Qwen2.5-7B-Instruct-GGUF",
        "Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Q4_K_M", "qwen2", 7_615_616_512, 4_683_073_184,
        _shape(7_615_616_512, 28, 3584, 28, 4, 128, 18944, 152064), tied_embeddings=False,
    ),
)


def by_name(name: str, catalog: tuple[CatalogEntry, ...] = CATALOG) -> CatalogEntry | None:
    """Case-insensitive lookup by short name."""
    key = name.strip().lower()
    return next((e for e in catalog if e.name == key), None)


def bundled_entry(catalog: tuple[CatalogEntry, ...] = CATALOG) -> CatalogEntry:
    return next(e for e in catalog if e.bundled)


def with_file_size(entry: CatalogEntry, size: int) -> CatalogEntry:
    """The same entry with the exact size of the downloaded file."""
    return replace(entry, file_size_bytes=size)
