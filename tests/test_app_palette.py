"""The app's colours come from app/palette.py only: no colour literal anywhere else in app/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
# "#rgb" / "#rrggbb" (/ with alpha), or a named colour in a stylesheet ("color: red", "background: white")
COLOUR = re.compile(r"#[0-9A-Fa-f]{3,8}\b|\b(?:color|background)\s*:\s*[A-Za-z]+\b")


def test_colours_are_named_in_the_palette_only() -> None:
    found = []
    for path in sorted(APP.glob("*.py")):
        if path.name == "palette.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and COLOUR.search(node.value):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert not found, "colours outside app/palette.py:\n" + "\n".join(found)


def test_the_palette_is_plain_colour_strings() -> None:
    from app import palette

    names = [n for n in vars(palette) if n.isupper()]
    assert names
    for name in names:
        assert re.fullmatch(r"#[0-9A-Fa-f]{3}(?:[0-9A-Fa-f]{3})?", getattr(palette, name)), name
