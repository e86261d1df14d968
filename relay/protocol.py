"""The SAPO Swarm wire protocol: every message between a node and the relay.

Defined once here and imported by both sides (``engine.swarm`` and ``relay.server``).
Frames are JSON text; each carries the protocol version ``v`` and a ``type`` tag.
msgspec does the decoding and the type checks at C speed; the range and size
checks it cannot express are in ``Group.__post_init__`` and friends, so a
decoded message is always a valid one.

This module does no I/O.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

PROTOCOL_VERSION = 1

# Bounds on what a peer may send. Generous for real use, tight enough that one
# hostile frame cannot cost the relay more than a few hundred KB.
MAX_FRAME_BYTES = 1 << 20
MAX_COMPLETIONS = 64
MAX_COMPLETION_CHARS = 16_384
MAX_QUESTION_CHARS = 16_384
MAX_NAME_CHARS = 128
MAX_CONFIG_ITEMS = 32

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS)]
ConfigValue = int | float | str | bool | list[int | float | str | bool] | None


class TaskSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Everything reasoning-gym needs to regenerate one question and its answer.

    ``reasoning_gym.create_dataset(dataset, seed=seed, size=index + 1, **config)[index]``
    """

    dataset: Name
    config: dict[str, ConfigValue]
    seed: Annotated[int, msgspec.Meta(ge=0, lt=2**63)]
    index: Annotated[int, msgspec.Meta(ge=0, lt=2**31)]

    def __post_init__(self) -> None:
        if len(self.config) > MAX_CONFIG_ITEMS:
            raise ValueError(f"config has more than {MAX_CONFIG_ITEMS} items")

    def key(self) -> str:
        """A stable string identity, e.g. for dedup and logs."""
        return msgspec.json.encode(self, order="sorted").decode()


class Group(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One question and the L answers a node generated for it, as plain text.

    ``rewards`` are the sender's claims; a receiver never trusts them and
    re-scores every completion itself (``engine.verify``).
    """

    spec: TaskSpec
    question: Annotated[str, msgspec.Meta(max_length=MAX_QUESTION_CHARS)]
    answer: Annotated[str, msgspec.Meta(max_length=MAX_QUESTION_CHARS)]
    completions: Annotated[
        list[Annotated[str, msgspec.Meta(max_length=MAX_COMPLETION_CHARS)]],
        msgspec.Meta(min_length=2, max_length=MAX_COMPLETIONS),
    ]
    rewards: list[Annotated[float, msgspec.Meta(ge=-10.0, le=10.0)]]
    model: Name
    round: Annotated[int, msgspec.Meta(ge=0, lt=2**31)] = 0

    def __post_init__(self) -> None:
        if len(self.rewards) != len(self.completions):
            raise ValueError("rewards and completions differ in length")
