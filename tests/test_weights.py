"""The working copy: auto means Q8_0 for a Q4_1 source, and a cached copy of another format is never taken for it."""

from __future__ import annotations

from pathlib import Path

import llama_cpp as lc

from engine.models.working_copy import choose_format, file_identity, source_ftype, working_gguf


def test_auto_working_copy_of_the_bundled_model_is_q8_0(bundled_gguf: Path, tmp_path: Path):
    assert source_ftype(bundled_gguf) == lc.LLAMA_FTYPE_MOSTLY_Q4_1
    assert choose_format(bundled_gguf, "auto") == "q8_0"
    assert choose_format(bundled_gguf, "as-is") is None and working_gguf(bundled_gguf, "as-is", tmp_path) == bundled_gguf
    # A Q4_0 copy of the same source from before (the old auto) sits in the cache: auto must not pick it up.
    old = tmp_path / f"{bundled_gguf.stem}.q4_0.{file_identity(bundled_gguf)}.gguf"
    old.write_bytes(b"an old Q4_0 copy")
    path = working_gguf(bundled_gguf, "auto", tmp_path)
    assert path != old and ".q8_0." in path.name
    assert source_ftype(path) == lc.LLAMA_FTYPE_MOSTLY_Q8_0
    assert working_gguf(bundled_gguf, "q8_0", tmp_path) == path  # cached: made once
    assert old.read_bytes() == b"an old Q4_0 copy"
