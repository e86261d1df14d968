"""The node's llama.cpp model: weights, one reusable context, tokenizer, chat template, LoRA slot.

A thin owner of llama-cpp-python's low-level objects. It uses the C API rather than the
high-level ``Llama`` class because batched multi-sequence decoding, per-sequence KV
copies and runtime adapter swaps are only reachable there. The same tokenizer and chat
template serve the training side (``engine.policy``), so both sides see the same ids.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Sequence

import llama_cpp as lc
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from engine.errors import SapoError

# A plain ChatML template for models that ship none.
_FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_backend_ready = False


def init_backend() -> None:
    """Once per process, before any llama.cpp call: also silences its logging."""
    global _backend_ready
    if not _backend_ready:
        lc.llama_backend_init()
        lc.llama_log_set(_silent_log, ctypes.c_void_p(0))  # llama.cpp is chatty on stderr
        _backend_ready = True


@lc.llama_log_callback
def _silent_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if os.environ.get("SAPO_LLAMA_LOG"):
        print(text.decode(errors="replace"), end="")


class LlamaModel:
    """One GGUF model with one context of ``n_ctx`` cells shared by up to ``n_seq_max`` sequences."""

    def __init__(self, path: Path, *, n_ctx: int = 4096, n_seq_max: int = 32, threads: int = 2,
                 n_batch: int = 512, n_gpu_layers: int = 0) -> None:
        init_backend()
        self.path = Path(path)
        if not self.path.is_file():
            raise SapoError(f"model file not found: {self.path}")
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        self.model = lc.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self.model:
            raise SapoError(f"llama.cpp could not load {self.path} (corrupt file or unsupported model)")
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.n_batch = n_batch
        self.n_seq_max = n_seq_max
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq_max
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = True  # lets a prompt's KV cells be shared by all its completions
        cparams.no_perf = True
        self.ctx = lc.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            lc.llama_model_free(self.model)
            raise SapoError(f"llama.cpp could not create a context of {n_ctx} tokens for {self.path}")
        self.n_ctx = lc.llama_n_ctx(self.ctx)
        self.memory = lc.llama_get_memory(self.ctx)
        self.batch = lc.llama_batch_init(max(n_batch, n_seq_max), 0, 1)
        self.eog_mask = np.array([lc.llama_vocab_is_eog(self.vocab, t) for t in range(self.n_vocab)])
        self.eog_ids = np.flatnonzero(self.eog_mask)
        self._piece_cache: dict[int, bytes] = {}
        self._formatter = Jinja2ChatFormatter(
            self.meta("tokenizer.chat_template") or _FALLBACK_TEMPLATE,
            eos_token=self.piece(lc.llama_vocab_eos(self.vocab), special=True).decode(errors="replace"),
            bos_token=self.piece(lc.llama_vocab_bos(self.vocab), special=True).decode(errors="replace"),
            add_generation_prompt=True,
        )
        self._adapter: lc.llama_adapter_lora_p | None = None

    # --- metadata ---
    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = lc.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode(errors="replace") if n >= 0 else None

    @property
    def n_params(self) -> int:
        return int(lc.llama_model_n_params(self.model))

    # --- tokenizer ---
    def tokenize(self, text: str, *, special: bool = False, add_bos: bool = False) -> list[int]:
        data = text.encode()
        cap = len(data) + 16
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos, special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_bos, special)
        return list(buf[:n])

    def piece(self, token: int, *, special: bool = False) -> bytes:
        key = token if not special else -token - 1
        cached = self._piece_cache.get(key)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
            cached = self._piece_cache[key] = buf.raw[:n]
        return cached

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Text of generated tokens, end-of-generation markers left out."""
        return b"".join(self.piece(t) for t in tokens if not self.eog_mask[t]).decode("utf-8", errors="replace")

    def render_chat(self, messages: list[dict[str, str]]) -> str:
        return self._formatter(messages=messages).prompt

    def prompt_tokens(self, messages: list[dict[str, str]]) -> list[int]:
        text = self.render_chat(messages)
        add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        bos_text = self.piece(lc.llama_vocab_bos(self.vocab), special=True).decode(errors="replace")
        if add_bos and bos_text and text.startswith(bos_text):
            add_bos = False  # the template wrote it already
        return self.tokenize(text, special=True, add_bos=add_bos)

    # --- decoding ---
    def clear(self) -> None:
        lc.llama_memory_clear(self.memory, True)

    def copy_seq(self, src: int, dst: int) -> None:
        lc.llama_memory_seq_cp(self.memory, src, dst, -1, -1)

    def decode(self, tokens: Sequence[int], positions: Sequence[int], seqs: Sequence[int],
               want_logits: Sequence[bool]) -> np.ndarray:
        """Decode one batch; returns the logits rows asked for, as a (n_out, n_vocab) view.

        The view is only valid until the next decode.
        """
        n = len(tokens)
        b = self.batch
        b.n_tokens = n
        for i in range(n):
            b.token[i] = tokens[i]
            b.pos[i] = positions[i]
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seqs[i]
            b.logits[i] = want_logits[i]
        rc = lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with code {rc} (context of {self.n_ctx} cells full?)")
        n_out = sum(1 for w in want_logits if w)
        ptr = lc.llama_get_logits(self.ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    def decode_prompt(self, tokens: Sequence[int], seq: int) -> np.ndarray:
        """Decode a whole prompt on one sequence; returns the last token's logits (a copy)."""
        last = None
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            is_last = start + self.n_batch >= len(tokens)
            want = [False] * len(chunk)
            if is_last:
                want[-1] = True
            out = self.decode(chunk, range(start, start + len(chunk)), [seq] * len(chunk), want)
            if is_last:
                last = out[0].copy()
        assert last is not None, "empty prompt"
        return last

    def token_logprobs(self, tokens: Sequence[int], start: int) -> np.ndarray:
        """log p(tokens[i] | tokens[:i]) for i >= start, by the current weights and adapter."""
        self.clear()
        rows = []
        for s in range(0, len(tokens), self.n_batch):
            chunk = tokens[s:s + self.n_batch]
            logits = self.decode(chunk, range(s, s + len(chunk)), [0] * len(chunk), [True] * len(chunk))
            rows.append(logits.astype(np.float64))
        logits = np.concatenate(rows)[:-1]
        logz = np.logaddexp.reduce(logits, axis=1)
        targets = np.asarray(tokens[1:])
        lp = logits[np.arange(len(targets)), targets] - logz
        self.clear()
        return lp[start - 1:]

    def set_threads(self, threads: int) -> None:
        lc.llama_set_n_threads(self.ctx, threads, threads)

    # --- LoRA adapter ---
    def swap_adapter(self, path: Path | None) -> None:
        """Replace the active LoRA (or remove it with None) without reloading the base model."""
        new = None
        if path is not None:
            new = lc.llama_adapter_lora_init(self.model, str(path).encode())
            if not new:
                raise SapoError(f"llama.cpp could not load the LoRA adapter {path}")
        if new is None:
            lc.llama_set_adapters_lora(self.ctx, None, 0, None)
        else:
            adapters = (lc.llama_adapter_lora_p_ctypes * 1)(new)
            scales = (ctypes.c_float * 1)(1.0)
            lc.llama_set_adapters_lora(self.ctx, adapters, 1, scales)
        if self._adapter is not None:
            lc.llama_adapter_lora_free(self._adapter)
        self._adapter = new
        self.clear()  # cached keys/values were computed with the old weights

    def close(self) -> None:
        if getattr(self, "ctx", None):
            lc.llama_set_adapters_lora(self.ctx, None, 0, None)
            if self._adapter is not None:
                lc.llama_adapter_lora_free(self._adapter)
                self._adapter = None
            lc.llama_batch_free(self.batch)
            lc.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            lc.llama_model_free(self.model)
            self.model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
