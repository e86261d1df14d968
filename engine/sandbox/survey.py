"""The reasoning-gym source the safe scorers were surveyed against, and a check that it is what is installed.

``survey.json`` (next to this file) holds, for the surveyed version, per dataset the sha256 of the source of its
``score_answer``, of its generator (``__getitem__``) and of the modules that define them (their helpers live
there). ``changed()`` lists what differs in the installed reasoning-gym; tests/test_survey.py fails on any
difference, pointing to the upgrade procedure (docs/SECURITY.md, "Pinned and surveyed").

    python -m engine.sandbox.survey          # what differs from survey.json, if anything
    python -m engine.sandbox.survey --write  # store the installed version's hashes (after a re-survey only)
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

SURVEY_FILE = Path(__file__).with_name("survey.json")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _definer(cls: type, name: str) -> Any:
    return next(c.__dict__[name] for c in cls.__mro__ if name in c.__dict__)


def installed() -> dict[str, Any]:
    """Hashes of the installed reasoning-gym's scorers and generators, per dataset (as stored in survey.json)."""
    import reasoning_gym

    datasets: dict[str, Any] = {}
    for name, (cls, _config) in sorted(reasoning_gym.factory.DATASETS.items()):
        score, gen = _definer(cls, "score_answer"), _definer(cls, "__getitem__")
        modules = sorted({inspect.getmodule(f).__name__ for f in (score, gen)} | {cls.__module__})  # type: ignore[union-attr]
        datasets[name] = {
            "score_answer": _sha(inspect.getsource(score)),
            "generator": _sha(inspect.getsource(gen)),
            "modules": {m: _sha(inspect.getsource(sys.modules[m])) for m in modules},
        }
    return {"reasoning_gym": metadata.version("reasoning_gym"), "datasets": datasets}


def stored() -> dict[str, Any]:
    return json.loads(SURVEY_FILE.read_text())


def changed(now: dict[str, Any] | None = None, then: dict[str, Any] | None = None) -> list[str]:
    """What differs between the installed reasoning-gym and the surveyed one: empty when nothing does."""
    now, then = now or installed(), then or stored()
    out = []
    if now["reasoning_gym"] != then["reasoning_gym"]:
        out.append(f"version {now['reasoning_gym']} installed, {then['reasoning_gym']} surveyed")
    for name in sorted(set(now["datasets"]) | set(then["datasets"])):
        a, b = now["datasets"].get(name), then["datasets"].get(name)
        if a is None or b is None:
            out.append(f"{name}: {'removed' if a is None else 'new, not surveyed'}")
            continue
        for part in ("score_answer", "generator"):
            if a[part] != b[part]:
                out.append(f"{name}: {part} changed")
        for module in sorted(set(a["modules"]) | set(b["modules"])):
            if a["modules"].get(module) != b["modules"].get(module):
                out.append(f"{name}: module {module} changed")
    return out


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        data = installed()
        SURVEY_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"stored {len(data['datasets'])} datasets of reasoning-gym {data['reasoning_gym']} in {SURVEY_FILE}")
        return 0
    diff = changed()
    print("\n".join(diff) if diff else "the installed reasoning-gym is the surveyed one")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
