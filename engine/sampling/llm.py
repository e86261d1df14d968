"""The node's llama.cpp model: weights, one reusable context, tokenizer, chat template, LoRA slot.

A thin owner of llama-cpp-python's low-level objects. It uses the C API rather than the
high-level ``Llama`` class because batched multi-sequence decoding, per-sequence KV
copies and runtime adapter swaps are only reachable there. The same tokenizer and chat
template serve the training side (``engine.learning.policy``), so both sides see the same ids.

Chat template: the file's own; a base model's file often has none, and then the template
of its family's instruct models (Gemma's turns, else ChatML). Some families (Gemma) have no
system role: Gemma's template puts the system text at the top of the first user turn, and a
template that refuses a system turn outright gets the same folding done here. The template
and tokenizer are tried once at load, so an unusable file fails there with one line.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Sequence

import llama_cpp as lc
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from engine.errors import SapoError, first_line

# A plain ChatML template for models that ship none.
_FALLBACK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Gemma 3's own template (google/gemma-3-*-it), text parts only: roles user and model, and the
# system text opening the first user turn. Base Gemma GGUFs ship no template but know its tokens.
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)
FALLBACK_TEMPLATES = {"gemma3": GEMMA_TEMPLATE}

# A conversation of every role, rendered once at load to see whether the template is usable.
_PROBE = [
    {"role": "system", "content": "probe system text"},
    {"role": "user", "content": "probe question one"},
    {"role": "assistant", "content": "probe answer one"},
    {"role": "user", "content": "probe question two"},
]

_backend_ready = False
_last_error = ""  # llama.cpp's latest error-level log line: the reason behind a failed load


def init_backend() -> None:
    """Once per process, before any llama.cpp call: also silences its logging."""
    global _backend_ready
    if not _backend_ready:
        lc.llama_backend_init()
        lc.llama_log_set(_silent_log, ctypes.c_void_p(0))  # llama.cpp is chatty on stderr
        _backend_ready = True


@lc.llama_log_callback
def _silent_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    global _last_error
    line = text.decode(errors="replace")
    if level == 3 and line.strip():  # GGML_LOG_LEVEL_ERROR
        _last_error = line.strip()
    if os.environ.get("SAPO_LLAMA_LOG"):
        print(line, end="")


def fold_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """A leading system turn moved into the first user turn, the way Gemma's template does it."""
    if not messages or messages[0]["role"] != "system":
        return messages
    system, rest = messages[0]["content"], list(messages[1:])
    if rest and rest[0]["role"] == "user":
        return [{"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}, *rest[1:]]
    return [{"role": "user", "content": system}, *rest]


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
        global _last_error
        _last_error = ""
        self.model = lc.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self.model:
            reason = _last_error[:200] or "corrupt file or unsupported model"
            raise SapoError(f"llama.cpp could not load {self.path.name}: {reason}")
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
        cparams.swa_full = True  # (the default) sliding-window layers (Gemma) keep every cell, as seq_cp expects
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
        self._adapter: lc.llama_adapter_lora_p | None = None
        self.fold_system = False  # True when the template refuses a system turn
        try:
            self._check_tokenizer()
            self._formatter = self._load_template()
        except BaseException:
            self.close()
            raise

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
        return self._formatter(messages=fold_system(messages) if self.fold_system else messages).prompt

    def _check_tokenizer(self) -> None:
        """A vocabulary that can end an answer and turns plain text into tokens and back."""
        name = self.path.name
        if self.n_vocab <= 0:
            raise SapoError(f"{name} has no tokenizer vocabulary: llama.cpp cannot sample from it")
        if not len(self.eog_ids):
            raise SapoError(f"{name}'s tokenizer has no end-of-generation token: answers could never end")
        probe = "Probe: 12 + 30 = 42, <answer>42</answer>"
        ids = self.tokenize(probe)
        if not ids or any(not 0 <= t < self.n_vocab for t in ids) or self.detokenize(ids).strip() != probe:
            raise SapoError(f"{name}'s tokenizer does not round-trip plain text: it cannot be used for training")

    def _load_template(self) -> Jinja2ChatFormatter:
        """The file's chat template (or its family's), tried on every role; folds the system turn if refused."""
        own = self.meta("tokenizer.chat_template")
        arch = self.meta("general.architecture") or ""
        template = own or FALLBACK_TEMPLATES.get(arch, _FALLBACK_TEMPLATE)
        where = f"the chat template of {self.path.name}" if own else f"the built-in {arch or 'ChatML'} chat template"
        try:
            formatter = Jinja2ChatFormatter(
                template,
                eos_token=self.piece(lc.llama_vocab_eos(self.vocab), special=True).decode(errors="replace"),
                bos_token=self.piece(lc.llama_vocab_bos(self.vocab), special=True).decode(errors="replace"),
                add_generation_prompt=True,
            )
        except Exception as exc:  # noqa: BLE001 - jinja2 syntax and sandbox errors alike
            raise SapoError(f"{where} cannot be used: {first_line(exc, 160)}") from None
        error = ""
        for fold in (False, True):
            try:
                text = formatter(messages=fold_system(_PROBE) if fold else _PROBE).prompt
            except Exception as exc:  # noqa: BLE001 - raise_exception() in a template, type errors, ...
                error = first_line(exc, 160)
                continue
            if not isinstance(text, str) or not all(m["content"] in text for m in _PROBE):
                error = "it leaves out part of the conversation"
                continue
            self.fold_system = fold
            return formatter
        raise SapoError(f"{where} cannot be used: {error}")

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

    def copy_seq(self, src: int, dst: int, end: int = -1) -> None:
        """Share ``src``'s KV cells with ``dst`` (no recomputation): all of them, or those of positions [0, end)."""
        lc.llama_memory_seq_cp(self.memory, src, dst, 0 if end >= 0 else -1, end)

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
        return self.decode_prompts([(seq, tokens, 0)])[0]

    def decode_prompts(self, parts: Sequence[tuple[int, Sequence[int], int]]) -> list[np.ndarray]:
        """Decode several token runs, each ``(seq, tokens, first position)``, packed into as few
        ``llama_decode`` calls as ``n_batch`` allows; returns each run's last-token logits (copies), in order.

        A run continues its sequence from ``first position`` (cells before it already there, e.g.
        shared from another sequence by ``copy_seq``); tokens of different sequences in one call
        see only their own sequence's cells.
        """
        flat = [(i, seq, tok, start + j) for i, (seq, tokens, start) in enumerate(parts)
                for j, tok in enumerate(tokens)]
        if any(not tokens for _, tokens, _ in parts):
            raise ValueError("empty prompt")
        last = {i: start + len(tokens) - 1 for i, (_, tokens, start) in enumerate(parts)}
        out: list[np.ndarray | None] = [None] * len(parts)
        for lo in range(0, len(flat), self.n_batch):
            chunk = flat[lo:lo + self.n_batch]
            want = [pos == last[i] for i, _, _, pos in chunk]
            rows = self.decode([t for _, _, t, _ in chunk], [p for _, _, _, p in chunk],
                               [s for _, s, _, _ in chunk], want)
            for row, (i, _, _, _) in zip(rows, [c for c, w in zip(chunk, want) if w]):
                out[i] = row.copy()
        return out  # type: ignore[return-value]

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

    @property
    def has_adapter(self) -> bool:
        return self._adapter is not None

    def use_adapter(self, enabled: bool) -> None:
        """Switch the loaded LoRA off (the base model) or back on, keeping it loaded: no file read, no reload."""
        if enabled and self._adapter is not None:
            adapters = (lc.llama_adapter_lora_p_ctypes * 1)(self._adapter)
            scales = (ctypes.c_float * 1)(1.0)
            lc.llama_set_adapters_lora(self.ctx, adapters, 1, scales)
        else:
            lc.llama_set_adapters_lora(self.ctx, None, 0, None)
        self.clear()

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
