"""Who drew a question, and when two groups are the same work (issue 23: credit only for original work).

**A question belongs to its author.** A node draws its training questions from per-task streams whose
reasoning-gym seed is ``stream_seed(node_id, seed, lane, dataset, config)``: a hash of its own node id
(itself a hash of its public key), the user's seed and the stream's lane. A published group names the seed
and lane in ``Group.origin``, so the relay and every receiver recompute the seed from the *signer's* node
id and refuse a group whose ``spec.seed`` is not that (``not_author``). A copier who re-signs another node's
group with its own key would need its own id to hash to the author's 63-bit seed (a second preimage of
BLAKE2b); a question of its own stream is a different question, whose regenerated text and answer the
copied completions do not match.

**The same work is one group.** ``normal_content`` is what a group teaches: its answer (its question where
it has none) and its completions, each casefolded with runs of whitespace made one space, in sorted order.
The relay pools one group per such content (``duplicate_content``), a receiver trains it once and the
author's own node never trains its own work back (``copy``): so a copier who finds a question of its own
stream with the same answer (easy in tiny question spaces) and attaches another node's completions,
re-spaced, re-cased or reordered, gains nothing either.

Pure, no I/O; imported by the relay and the engine.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

MAIN_LANE = "main"


def derive_seed(*parts: object) -> int:
    """A 63-bit seed from any parts, stable across Python runs (unlike ``hash``)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def config_key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def stream_seed(node_id: str, seed: int, lane: str, dataset: str, config: dict[str, Any]) -> int:
    """The reasoning-gym seed of a node's question stream for one task's settings.

    (The main lane has no lane part: its seeds are those nodes drew before lanes existed.)
    """
    lane_part = () if lane == MAIN_LANE else (lane,)
    return derive_seed("train", node_id, seed, *lane_part, dataset, config_key(config))


def normal_text(text: str) -> str:
    """Casefolded, every run of whitespace one space: what a trivial change leaves alike."""
    return " ".join(text.casefold().split())


def normal_content(answer: str, question: str, completions: list[str]) -> list[Any]:
    """What a group teaches, the same for copies that differ in spacing, case or completion order."""
    what = normal_text(answer) or normal_text(question)
    return [what, sorted(normal_text(c) for c in completions)]
