"""A learnable frontier: each task's difficulty level follows this node's own success rate.

Groups without reward spread train nothing: near-solved tasks (every answer right) and hopeless
ones (every answer wrong) give none, alone or shared. With ``frontier`` on, a node keeps each task
near the level where its own success rate is about one half, using reasoning-gym's curricula.

Levels (``ladder``). Level 0 is the task's config in the node's mix (its preset, with the user's
settings on top). Higher levels apply the task's reasoning-gym curriculum on top of it: each
curriculum attribute starts at its lowest level at least as hard as level 0 (an attribute that level
0 sets beyond the curriculum, or to a value off it, stays as set), then the attributes are raised one
step each in turn, one step per level, so each move is small. Levels that reasoning-gym would see as
the same settings are skipped, and the ladder ends before the first config outside ``ANY_TASK_CAPS``
(or one reasoning-gym rejects): every level is cheap to generate and score. A task without a
curriculum or without caps has level 0 only; so has one whose level 0 is at or beyond the
curriculum's top (the paper preset's basic_arithmetic). Levels never go below level 0: a task
hopeless at its preset stays there. The ladder is a pure function of the level-0 entry, so nodes
with the same mix have the same ladders, and a peer's spec at any level of an own task's ladder is
one this node would draw itself (``questions.admit``).

Moves (``next_level``): per task, an exponential moving average of the own success rate (the
fraction of fully correct answers) at the current level; after at least ``MIN_GRADED`` graded
groups at that level, above ``RAISE_ABOVE`` the level goes up one step, below ``LOWER_BELOW`` down
one step, never outside [0, top]; a move starts the average afresh. The held-out set stays at
level 0, so evaluations stay comparable. ``task_levels`` sets a task's starting level (checked by
``check_levels`` before any work: a level outside the ladder is a one-line error); a checkpoint's
levels go on instead.

Off by default (``frontier``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

import reasoning_gym
from reasoning_gym.coaching.attributes import AttributeDefinition, RangeAttributeDefinition
from reasoning_gym.coaching.base_curriculum import DefaultCurriculumContext, RangeAttributeMode

from engine.errors import SapoError
from engine.tasks.caps import config_within_caps

RAISE_ABOVE = 0.7  # success EMA above which the task gets harder
LOWER_BELOW = 0.3  # ... below which it gets easier
MIN_GRADED = 4  # groups graded at a level before it may move again
SUCCESS_EMA = 0.3  # weight of the latest round in the success average (as selection.ACCURACY_EMA)


@dataclass(frozen=True)
class TaskLevel:
    """Where one task stands: its level, the success average there, and groups graded there."""

    level: int = 0
    success: float | None = None  # None: nothing graded at this level yet
    graded: int = 0


def next_level(level: int, success: float | None, graded: int, top: int, floor: int = 0) -> int:
    """The level after a round: at most one step from ``level``, within [floor, top] (floor: a swarm manifest's
    lowest level of the task, else 0)."""
    if success is None or graded < MIN_GRADED:
        return max(floor, min(level, top))
    if success > RAISE_ABOVE:
        level += 1
    elif success < LOWER_BELOW:
        level -= 1
    return max(floor, min(level, top))


def update(state: TaskLevel, round_success: float, groups: int, top: int, floor: int = 0) -> TaskLevel:
    """A task's state after ``groups`` own groups at its level scored ``round_success`` (0..1) this round."""
    if groups <= 0:
        return state
    success = round_success if state.success is None else (1 - SUCCESS_EMA) * state.success + SUCCESS_EMA * round_success
    graded = state.graded + groups
    level = next_level(state.level, success, graded, top, floor)
    if level != state.level:
        return TaskLevel(level)
    return TaskLevel(level, success, graded)


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


@lru_cache(maxsize=128)
def _ladder(dataset: str, config_key: str) -> tuple[str, ...]:
    base = json.loads(config_key)
    rungs = [config_key]
    if not reasoning_gym.factory.has_curriculum(dataset):
        return tuple(rungs)
    curriculum = reasoning_gym.factory.create_curriculum(dataset)
    defaults = dataclasses.asdict(reasoning_gym.factory.DATASETS[dataset][1]())
    effective = {**defaults, **base}
    seen = {_key(effective)}  # as reasoning-gym sees it: a rung that only spells out defaults is no new rung
    attributes = []
    for attr in curriculum.attributes.values():
        start = _start_level(attr, effective)
        if start is not None:  # else the mix fixes it to a value off the curriculum: it stays
            curriculum.set_attr_level(attr.name, start)
            attributes.append(attr)
    steps = [None] + [a for _ in range(max((len(a.levels) for a in attributes), default=0)) for a in attributes]
    for attr in steps:
        if attr is not None:
            if curriculum.get_attr_level(attr.name) >= len(attr.levels) - 1:
                continue
            curriculum.increment_attr_level(attr.name)
        config = _curriculum_config(curriculum, attributes, base)
        key, effective_key = _key(config), _key({**defaults, **config})
        if effective_key in seen:
            continue
        if not config_within_caps(dataset, config) or not valid_config(dataset, config):
            break
        seen.add(effective_key)
        rungs.append(key)
    return tuple(rungs)


def valid_config(dataset: str, config: dict[str, Any]) -> bool:
    """True if reasoning-gym makes a question with these settings (some fail only then, not in the constructor)."""
    try:
        reasoning_gym.create_dataset(dataset, seed=0, size=1, **config)[0]
    except Exception:  # noqa: BLE001 - reasoning-gym raises assorted types
        return False
    return True


def _upper(attr: AttributeDefinition, level: int) -> Any:
    """The attribute's value (a range's upper end) at ``level``, as ``_curriculum_config`` sets it."""
    if isinstance(attr, RangeAttributeDefinition) and attr.ensure_interval:
        level = min(level + 1, len(attr.levels) - 1)
    return attr.levels[level]


def _start_level(attr: AttributeDefinition, config: dict[str, Any]) -> int | None:
    """The attribute's lowest level at least as hard as ``config``; None where there is none, or the
    config's value is off the curriculum (a list of words it does not have): the attribute stays as set."""
    name = attr.upper_field_name if isinstance(attr, RangeAttributeDefinition) else attr.field_name
    value = config.get(name)
    numbers = all(type(v) in (int, float) for v in attr.levels)
    if not numbers or type(value) not in (int, float):
        return attr.levels.index(value) if value in attr.levels else None
    rising = attr.levels[-1] >= attr.levels[0]
    harder = [i for i in range(len(attr.levels)) if (_upper(attr, i) >= value if rising else _upper(attr, i) <= value)]
    return min(harder, default=None)


def _curriculum_config(curriculum: Any, attributes: list[AttributeDefinition], base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with the attributes at the curriculum's current levels (ranges from the lowest level up)."""
    context = DefaultCurriculumContext(mode=RangeAttributeMode.INCLUSIVE)
    out = dict(base)
    for attr in attributes:
        value = context.get_attr_value(curriculum, attr)
        if isinstance(attr, RangeAttributeDefinition):
            values = value if isinstance(value, list) else [value]
            out[attr.lower_field_name], out[attr.upper_field_name] = min(values), max(values)
        else:
            out[attr.field_name] = value
    return out


def ladder(dataset: str, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The task's configs by level: [config at level 0, level 1, ...]."""
    return [json.loads(k) for k in _ladder(dataset, _key(config))]


def top_level(dataset: str, config: dict[str, Any]) -> int:
    return len(_ladder(dataset, _key(config))) - 1


def config_at(dataset: str, config: dict[str, Any], level: int) -> dict[str, Any]:
    """The task's config at ``level`` (clamped to the ladder: [0, top])."""
    rungs = _ladder(dataset, _key(config))
    return json.loads(rungs[max(0, min(level, len(rungs) - 1))])


def level_of(dataset: str, config: dict[str, Any], spec_config: dict[str, Any]) -> int | None:
    """The level of a spec's config on the ladder of a task's level-0 config, or None if it is not on it."""
    rungs = _ladder(dataset, _key(config))
    key = _key(spec_config)
    return rungs.index(key) if key in rungs else None


def check_levels(mix: Sequence[Any], levels: dict[str, int]) -> None:
    """Starting levels (``task_levels``) must name tasks of the mix, each within its ladder: else a one-line error."""
    for task, level in levels.items():
        entry = next((e for e in mix if e.dataset == task), None)
        if entry is None:
            raise SapoError(f"task_levels: {task!r} is not a task of this node's mix")
        top = top_level(entry.dataset, entry.config)
        if not 0 <= level <= top:
            raise SapoError(f"task_levels: {task} level {level} is outside its ladder 0..{top} "
                            f"(levels end below the size caps of engine/tasks/caps.py)")


def update_levels(levels: dict[str, dict[str, Any]], rounds: dict[str, tuple[float, int]],
                  tops: dict[str, int], floors: dict[str, int] | None = None
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, int]]:
    """Every task's state after a round, as saved with the stream, and the moves made (task -> +1 or -1).

    ``levels``: task -> a ``TaskLevel`` as a dict (absent: level 0, nothing graded); ``rounds``: task ->
    (success rate, groups graded) of this round's own groups; ``tops``: task -> its top level; ``floors``: task ->
    its lowest level (a swarm manifest's level range; absent: 0).
    """
    out, moves = dict(levels), {}
    for task, (success, groups) in rounds.items():
        before = TaskLevel(**levels.get(task, {}))
        after = update(before, success, groups, tops.get(task, 0), (floors or {}).get(task, 0))
        out[task] = dataclasses.asdict(after)
        if after.level != before.level:
            moves[task] = after.level - before.level
    return out, moves
