"""Rollouts: L completions per question, all sequences of a round decoded together.

How a batch runs (one llama.cpp context, unified KV cache), as a prefix tree:
  1. prompts that begin alike share those cells: a task's questions all start with the same
     preamble (chat template, system prompt, worked examples: ~85 % of a tiny model's prompt),
     so it is decoded once, on the first of them, and the others copy its cells
     (``llama_memory_seq_cp``, no recomputation) and decode only their own tokens. The prompt
     tokens are today's, whole: the shared part is found by comparing token ids, so nothing is
     tokenized differently. Prompts of one level of the tree are decoded together;
  2. each question's KV cells are shared with its other L-1 sequences the same way, and L
     first tokens are sampled from the same logits;
  3. then one ``llama_decode`` per step carries the next token of every live sequence,
     and sampling for all of them is one numpy call.
Questions are packed into batches that fit the context; a round usually is one batch.

Sampling is hand-written (numpy) because llama.cpp's samplers work one sequence at a
time. Default is on-policy: temperature 1, no truncation, so the tokens we train on are
samples of the policy itself. Each row is drawn by inverting its cumulative distribution with
one uniform number, located block by block (``draw``); Gumbel-max, the usual vectorized way,
needs a random number per vocabulary entry and cost ~5x as much, ~8 % of a decoding step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from engine.tasks.groups import Completion
from engine.sampling.llm import LlamaModel
from engine.tasks.rewards import ANSWER_CLOSE

ANSWER_END = ANSWER_CLOSE.encode()


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 96
    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    stop_at_answer: bool = True
    min_tokens: int = 0  # end-of-generation is masked before this many tokens (benchmarks: fixed lengths)
    logprobs: bool = False  # record each sampled token's log-prob (the sampler's, before top-k/top-p)


@dataclass
class RolloutStats:
    tokens: int = 0
    seconds: float = 0.0
    sequences: int = 0
    prompt_tokens: int = 0  # the prompts' tokens, as if each were decoded alone
    prompt_tokens_computed: int = 0  # those actually decoded (a shared prefix once)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


# A row's probability mass is located block by block, then within one block: np.cumsum is a sequential
# loop (~4 ns an entry), so a whole-row cumulative sum per step would cost more than the exponentials.
BLOCK = 256


def draw(p: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One index per row of unnormalized probabilities p (n, V), drawn from p / sum(p) by the inverse of
    its cumulative distribution (one uniform number a row); returns the indices and the rows' sums.
    An entry with p == 0 is never drawn."""
    n, v = p.shape
    if v % BLOCK:
        p = np.pad(p, ((0, 0), (0, -v % BLOCK)))
    blocks = p.reshape(n, -1, BLOCK).sum(axis=2, dtype=np.float64)
    ends = np.cumsum(blocks, axis=1)
    u = rng.random(n) * ends[:, -1]
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        k = int(np.searchsorted(ends[i], u[i], side="right"))
        if k == ends.shape[1]:  # u rounded up to the row's sum: the last block with mass
            k = int(np.flatnonzero(blocks[i])[-1])
        seg = p[i, k * BLOCK:(k + 1) * BLOCK]
        within = np.cumsum(seg, dtype=np.float64)
        j = int(np.searchsorted(within, u[i] - (ends[i, k - 1] if k else 0.0), side="right"))
        if j == BLOCK or seg[j] == 0:  # rounding past the block's last entry with mass
            j = int(np.flatnonzero(seg)[-1])
        out[i] = k * BLOCK + j
    return out, ends[:, -1]


def sample_tokens(logits: np.ndarray, rng: np.random.Generator, temperature: float = 1.0,
                  top_k: int = 0, top_p: float = 1.0, logprobs: bool = False
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """One token per row of (n, vocab) logits, by the inverse of softmax(logits / T)'s cumulative
    distribution (one uniform number a row), and with ``logprobs`` each token's log softmax(logits / T)
    (the sampler's probability before top-k/top-p)."""
    if temperature == 0:
        tokens = logits.argmax(axis=1)
        return tokens, (token_logprobs(logits, tokens, 1.0) if logprobs else None)
    z = logits if temperature == 1 else logits / np.float32(temperature)
    full = z
    if top_k and top_k < z.shape[1]:
        kth = np.partition(z, -top_k, axis=1)[:, -top_k, None]
        z = np.where(z < kth, -np.inf, z)
    if top_p < 1.0:
        order = np.argsort(-z, axis=1)
        zs = np.take_along_axis(z, order, axis=1)
        p = np.exp(zs - zs[:, :1])
        p /= p.sum(axis=1, keepdims=True)
        drop = np.cumsum(p, axis=1) - p >= top_p  # keep the smallest prefix reaching top_p
        zs[drop] = -np.inf
        z = np.empty_like(zs)
        np.put_along_axis(z, order, zs, axis=1)
    m = z.max(axis=1, keepdims=True)
    p = np.subtract(z, m, dtype=np.float32)
    np.exp(p, out=p)
    tokens, total = draw(p, rng)
    if not logprobs:
        return tokens, None
    if z is full:  # the normalizer is at hand: log sum exp(z) = m + log(total)
        return tokens, z[np.arange(len(z)), tokens] - (m[:, 0] + np.log(total)).astype(np.float32)
    return tokens, token_logprobs(logits, tokens, temperature)


def token_logprobs(logits: np.ndarray, tokens: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """log softmax(logits / T)[token] per row: the sampler's probability of what it sampled
    (engine.learning.offpolicy weighs training tokens by the trainer's probability over this)."""
    z = logits.astype(np.float32) / np.float32(temperature or 1.0)
    m = z.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(z - m).sum(axis=1))
    return z[np.arange(len(tokens)), tokens] - lse


@dataclass
class _Seq:
    prompt_len: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    finish: str | None = None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many tokens ``a`` and ``b`` share from the start."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def prefix_plan(prompts: Sequence[Sequence[int]]) -> list[tuple[int | None, int, int]]:
    """For each prompt: (the earlier prompt whose cells it shares or None, how many tokens, its level).

    Each prompt shares with the earlier prompt it has the longest common prefix with (ties: the
    lowest level, so that the tree stays shallow), always keeping at least its last token to
    decode (its logits start the completions). Level 0 decodes whole; level k + 1 waits for level k.
    """
    plan: list[tuple[int | None, int, int]] = []
    for q, p in enumerate(prompts):
        best: tuple[int | None, int, int] = (None, 0, 0)
        for j in range(q):
            k = min(common_prefix(prompts[j], p), len(p) - 1)
            level = plan[j][2] + 1
            if k > best[1] or (k == best[1] and k > 0 and level < best[2]):
                best = (j, k, level)
        plan.append(best)
    return plan


class RolloutGenerator:
    def __init__(self, llm: LlamaModel, seed: int = 0, share_prefixes: bool = True) -> None:
        self.llm = llm
        self.rng = np.random.default_rng(seed)
        self.last = RolloutStats()
        self.share_prefixes = share_prefixes  # False: every prompt decoded whole (the reference, for tests)
        self._prompt_computed = 0  # prompt tokens decoded by this generate call (the tree's saving shows here)

    def reseed(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def generate(self, prompts: Sequence[list[int]], n: int, params: SamplingParams,
                 greedy: int = 0, progress: Callable[[int, int], None] | None = None) -> list[list[Completion]]:
        """n completions for each prompt (token ids), in prompt order.

        The first ``greedy`` of each prompt's completions are greedy (argmax), the rest sampled
        with ``params``: evaluation gets greedy and sampled answers from one shared prompt decode.
        ``progress(done, total)`` is called after each decoding step with finished sequences
        of all ``len(prompts) * n`` (callers rate-limit what they show).
        """
        t0 = time.perf_counter()
        out: list[list[Completion]] = []
        tokens = 0
        self._prompt_computed = 0
        total = len(prompts) * n
        for chunk in self._pack(prompts, n, params.max_tokens):
            before = len(out) * n
            report = (lambda d, _b=before: progress(_b + d, total)) if progress is not None else None
            groups = self._generate_batch([prompts[i] for i in chunk], n, params, greedy, report)
            tokens += sum(len(c.token_ids) for g in groups for c in g)
            out.extend(groups)
        self.last = RolloutStats(tokens, time.perf_counter() - t0, len(prompts) * n,
                                 sum(len(p) for p in prompts), self._prompt_computed)
        return out

    def _pack(self, prompts: Sequence[list[int]], n: int, max_tokens: int) -> list[list[int]]:
        """Split prompt indices into batches that fit the context's cells and sequences."""
        batches: list[list[int]] = [[]]
        cells = 0
        for i, p in enumerate(prompts):
            need = len(p) + n * max_tokens
            if need > self.llm.n_ctx or n > self.llm.n_seq_max:
                raise ValueError(f"a prompt of {len(p)} tokens with {n} x {max_tokens} new tokens "
                                 f"does not fit a context of {self.llm.n_ctx} cells / {self.llm.n_seq_max} sequences")
            seqs = (len(batches[-1]) + 1) * n
            if batches[-1] and (cells + need > self.llm.n_ctx or seqs > self.llm.n_seq_max):
                batches.append([])
                cells = 0
            batches[-1].append(i)
            cells += need
        return batches

    def _generate_batch(self, prompts: list[list[int]], n: int, params: SamplingParams,
                        greedy: int = 0, progress: Callable[[int], None] | None = None) -> list[list[Completion]]:
        llm = self.llm
        llm.clear()
        seqs: list[_Seq] = []
        prompt_logits = self._decode_prompts(prompts, n)
        for q, prompt in enumerate(prompts):
            first = q * n
            logits = prompt_logits[q]
            for s in range(first + 1, first + n):
                llm.copy_seq(first, s)
            if params.min_tokens > 0:
                logits[self.llm.eog_ids] = -np.inf
            rows = np.broadcast_to(logits, (n, logits.shape[0]))
            firsts, lps = self._sample(rows, [j < greedy for j in range(n)], params)
            for j, tok in enumerate(firsts):
                seq = _Seq(prompt_len=len(prompt))
                if lps is not None:
                    seq.logprobs.append(float(lps[j]))
                self._push(seq, int(tok), params)
                seqs.append(seq)
        while True:
            live = [i for i, s in enumerate(seqs) if s.finish is None]
            if progress is not None:
                progress(len(seqs) - len(live))
            if not live:
                break
            logits = llm.decode(
                [seqs[i].tokens[-1] for i in live],
                [seqs[i].prompt_len + len(seqs[i].tokens) - 1 for i in live],
                live,
                [True] * len(live),
            )
            if params.min_tokens > 0:
                short = [j for j, i in enumerate(live) if len(seqs[i].tokens) < params.min_tokens]
                if short:
                    logits[np.ix_(short, self.llm.eog_ids)] = -np.inf
            nxt, lps = self._sample(logits, [i % n < greedy for i in live], params)
            if lps is not None:
                for i, lp in zip(live, lps):
                    seqs[i].logprobs.append(float(lp))
            for i, tok in zip(live, nxt):
                self._push(seqs[i], int(tok), params)
        llm.clear()
        return [
            [Completion(llm.detokenize(s.tokens), s.tokens, s.finish or "length", s.logprobs if params.logprobs else None)
             for s in seqs[q * n:(q + 1) * n]]
            for q in range(len(prompts))
        ]

    def _sample(self, logits: np.ndarray, greedy: list[bool], params: SamplingParams
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """Next tokens of these rows: argmax where ``greedy``, sampled with ``params`` elsewhere (only
        those rows are sampled); with ``params.logprobs`` each token's log-prob under softmax(logits / T)."""
        if not any(greedy):
            return sample_tokens(logits, self.rng, params.temperature, params.top_k, params.top_p, params.logprobs)
        tokens = logits.argmax(axis=1)
        rest = [j for j, g in enumerate(greedy) if not g]
        if rest:
            tokens[rest] = sample_tokens(logits[rest], self.rng, params.temperature, params.top_k, params.top_p)[0]
        return tokens, (token_logprobs(logits, tokens, params.temperature) if params.logprobs else None)

    def _decode_prompts(self, prompts: list[list[int]], n: int) -> list[np.ndarray]:
        """Each prompt decoded on its first sequence (q * n), as a prefix tree (module docstring);
        returns each prompt's last-token logits."""
        plan = prefix_plan(prompts) if self.share_prefixes else [(None, 0, 0)] * len(prompts)
        logits: list[np.ndarray] = [np.empty(0)] * len(prompts)
        for level in range(max(lv for _, _, lv in plan) + 1):
            here = [q for q, (_, _, lv) in enumerate(plan) if lv == level]
            for q in here:
                src, shared, _ = plan[q]
                if src is not None:
                    self.llm.copy_seq(src * n, q * n, shared)
            runs = [(q * n, prompts[q][plan[q][1]:], plan[q][1]) for q in here]
            for q, row in zip(here, self.llm.decode_prompts(runs)):
                logits[q] = row
        self._prompt_computed += sum(len(p) - shared for p, (_, shared, _) in zip(prompts, plan))
        return logits

    def _push(self, seq: _Seq, tok: int, params: SamplingParams) -> None:
        seq.tokens.append(tok)
        if self.llm.eog_mask[tok]:
            seq.finish = "eog"
            return
        seq.text += self.llm.piece(tok)
        if params.stop_at_answer and ANSWER_END in seq.text[-32:]:
            seq.finish = "answer"
        elif len(seq.tokens) >= params.max_tokens:
            seq.finish = "length"
