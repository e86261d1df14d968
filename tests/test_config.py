from __future__ import annotations

from pathlib import Path

import pytest

from engine.config import NodeConfig, build_config, load_toml, resolve_auto
from engine.errors import SapoError


def test_flags_override_the_file_which_overrides_defaults(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text('completions = 6\nmax_tokens = 64\n[task_weights]\nchain_sum = 2.5\n[task_config.chain_sum]\nmax_terms = 3\n')
    cfg = build_config(load_toml(f), {"completions": 3})
    assert cfg.completions == 3 and cfg.max_tokens == 64 and cfg.local_groups == NodeConfig().local_groups
    assert cfg.task_weights == {"chain_sum": 2.5} and cfg.task_config == {"chain_sum": {"max_terms": 3}}


def test_sections_and_dashes_are_accepted(tmp_path: Path):
    f = tmp_path / "node.toml"
    f.write_text('[swarm-settings]\nexternal-groups = 2\nrelay = "ws://127.0.0.1:9"\n')
    cfg = build_config(load_toml(f), {})
    assert cfg.external_groups == 2 and cfg.relay == "ws://127.0.0.1:9"


def test_auto_settings_follow_model_size():
    tiny = resolve_auto(NodeConfig(), 135_000_000)
    big = resolve_auto(NodeConfig(), 1_500_000_000)
    assert (tiny.preset, tiny.completions, tiny.max_tokens, tiny.fewshot, tiny.micro_batch) == ("easy", 4, 96, 2, 8)
    assert (big.preset, big.completions, big.max_tokens, big.fewshot, big.micro_batch) == ("paper", 8, 256, 0, 4)
    assert (big.local_groups, big.external_groups) == (4, 4)  # the paper's best setting
    assert resolve_auto(NodeConfig(preset="paper", completions=5), 1).completions == 5  # explicit wins


@pytest.mark.parametrize("values, needle", [
    ({"completions": 65}, "completions"), ({"eps_low": 1.0}, "clip"), ({"top_p": 0}, "top_p"),
    ({"lora_targets": []}, "LoRA targets"), ({"swarm": ""}, "swarm"), ({"seed": -1}, "seed"),
    ({"local_groups": "four"}, "local_groups"),
])
def test_invalid_values(values, needle):
    with pytest.raises(SapoError, match=needle):
        build_config({}, values)
