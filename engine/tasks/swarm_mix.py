"""A swarm manifest (wire/manifest.py) as a node's task mix: what it draws and which peers' specs it admits.

The node keeps its own prompts and few-shot examples (``questions.Prompts``, from its own mix entries); only
the tasks, their settings and weights, and the level ranges come from the manifest. For a task with setting
ranges the node draws at its own value (its ``task_config`` value where inside the range, else the low end)
and admits any value inside; for a task with a level range it starts at its own ``task_levels`` value
(clamped into the range, else the low end), moves only inside it with ``frontier``, and admits any level inside.
A level range past the top of the task's ladder here is cut at the top (said in ``notes``).

``swarm_mix`` raises ``SapoError`` (one line) where this node cannot follow the manifest: a dataset unknown to
its reasoning-gym, settings its reasoning-gym rejects. The caller then trains alone on its own mix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.errors import SapoError
from engine.tasks import frontier
from engine.tasks.questions import TaskEntry, build_mix
from wire.manifest import Manifest, manifest_problem, spec_within
from wire.protocol import TaskSpec


@dataclass(frozen=True)
class SwarmMix:
    """A manifest turned into this node's mix: its entries, starting levels, level bounds, and the admission rule."""

    manifest: Manifest
    digest: str
    mix: tuple[TaskEntry, ...]
    levels: dict[str, int] = field(default_factory=dict)  # starting level per task with a level range
    bounds: dict[str, tuple[int, int]] = field(default_factory=dict)  # task -> (lowest, highest) level
    notes: tuple[str, ...] = ()

    def admits(self, spec: TaskSpec) -> bool:
        """True if a peer's spec lies within the manifest: pure and cheap (a ladder is computed once per task)."""
        for task in self.manifest.tasks:
            if task.dataset != spec.dataset:
                continue
            if task.levels is None:
                return spec_within(task, spec.dataset, spec.config)
            low, high = self.bounds[task.dataset]
            level = frontier.level_of(task.dataset, dict(task.config), spec.config)
            return level is not None and low <= level <= high
        return False


def swarm_mix(manifest: Manifest, digest: str, task_config: dict[str, dict[str, Any]],
              task_levels: dict[str, int]) -> SwarmMix:
    """This node's mix under ``manifest``, with its own choices (``task_config``, ``task_levels``) inside the ranges."""
    if (problem := manifest_problem(manifest)) is not None:
        raise SapoError(f"swarm manifest: {problem}")
    configs = {t.dataset: t.config_at(task_config.get(t.dataset)) for t in manifest.tasks}
    weights = {t.dataset: t.weight for t in manifest.tasks}
    try:  # known datasets, settings reasoning-gym accepts: build_mix checks both (one question made per task)
        mix = build_mix("paper", list(configs), weights, configs)
    except SapoError as exc:
        raise SapoError(f"cannot follow swarm {manifest.swarm}'s manifest: {exc}") from None
    # build_mix puts the paper preset's settings (none) under ours: the entries are exactly the manifest's.
    levels, bounds, notes = {}, {}, []
    for task in manifest.tasks:
        if task.levels is None:
            continue
        top = frontier.top_level(task.dataset, dict(task.config))
        low, high = task.levels
        if low > top:
            raise SapoError(f"cannot follow swarm {manifest.swarm}'s manifest: task {task.dataset} levels "
                            f"{low}..{high} start above this node's ladder (0..{top})")
        if high > top:
            notes.append(f"task {task.dataset}: levels {low}..{high} cut at {top}, the top of its ladder here")
            high = top
        bounds[task.dataset] = (low, high)
        levels[task.dataset] = min(max(task_levels.get(task.dataset, low), low), high)
    return SwarmMix(manifest, digest, mix, levels, bounds, tuple(notes))
