"""reasoning-gym is the version the safe scorers were surveyed against, to the byte of every scorer and generator."""

from __future__ import annotations

import copy

from engine.sandbox import survey

UPGRADE = "docs/SECURITY.md, 'Pinned and surveyed': re-survey, re-lock, full suite, then `python -m engine.sandbox.survey --write`"


def test_the_installed_scorers_and_generators_are_the_surveyed_ones():
    diff = survey.changed()
    assert not diff, f"reasoning-gym differs from what was surveyed ({UPGRADE}):\n" + "\n".join(diff[:40])


def test_the_pin_is_the_surveyed_version():
    import tomllib
    from pathlib import Path

    deps = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"reasoning-gym=={survey.stored()['reasoning_gym']}" in deps, UPGRADE


def test_a_changed_scorer_is_named():
    now = survey.installed()
    then = copy.deepcopy(now)
    then["datasets"]["propositional_logic"]["score_answer"] = "0" * 64
    module = next(iter(then["datasets"]["countdown"]["modules"]))
    then["datasets"]["countdown"]["modules"][module] = "0" * 64
    del then["datasets"]["gcd"]
    assert survey.changed(now, then) == ["countdown: module reasoning_gym.games.countdown changed", "gcd: new, not surveyed",
                                         "propositional_logic: score_answer changed"]
    assert survey.changed(now, now) == []
