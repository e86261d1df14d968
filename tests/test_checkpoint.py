"""Checkpoints on a tiny real peft model: round trip, kill leftovers, corruption."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.learning.checkpoint import CheckpointDamaged, CheckpointStore, NodeState
from engine.errors import SapoError
from engine.learning.policy import attach_lora, lora_config


@pytest.fixture
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2)
    model = attach_lora(LlamaForCausalLM(cfg), lora_config(4, 8, 0.0, ["q_proj", "v_proj"]))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2)
    loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()
    opt.step()
    return model, opt


def _lora(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_round_trip_restores_weights_optimizer_and_state(tmp_path: Path, tiny):
    model, opt = tiny
    store = CheckpointStore(tmp_path)
    state = NodeState(round=3, stream={"draws": 12, "next_index": {"a": 4}}, history=[{"round": 3}], model="m",
                      held_back={"digest": "ab" * 32, "tasks": {"arc_1d": {"groups": 3, "answers": 12, "correct": 0}}})
    path = store.save(model, opt, state)
    assert store.latest() == path and path.name == "round-000003"
    saved = _lora(model)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(1.0)
    fresh_opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    loaded = store.load_state(path)
    store.load_weights(path, model, fresh_opt)
    assert loaded == state
    for name, value in _lora(model).items():
        assert torch.equal(value, saved[name]), name
    assert fresh_opt.state_dict()["state"].keys() == opt.state_dict()["state"].keys()


def test_plain_peft_can_load_the_checkpoint(tmp_path: Path, tiny):
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    model, opt = tiny
    path = CheckpointStore(tmp_path).save(model, opt, NodeState(round=1))
    base = LlamaForCausalLM(model.get_base_model().config)
    loaded = PeftModel.from_pretrained(base, str(path))
    a = dict(model.named_parameters())
    for name, p in loaded.named_parameters():
        if "lora_" in name:
            assert torch.equal(p, a[name])


def test_old_checkpoints_are_pruned_and_leftovers_ignored(tmp_path: Path, tiny):
    model, opt = tiny
    store = CheckpointStore(tmp_path)
    for r in range(1, 5):
        store.save(model, opt, NodeState(round=r))
    assert sorted(p.name for p in tmp_path.glob("round-*")) == ["round-000003", "round-000004"]
    # A save killed halfway leaves a temp folder that is never taken for a checkpoint...
    half = tmp_path / ".round-000005.tmp999"
    half.mkdir()
    (half / "state.json").write_text("{")
    assert store.latest().name == "round-000004"
    # ... and is swept on the next save.
    store.save(model, opt, NodeState(round=5))
    assert not half.exists()


@pytest.mark.parametrize("damage", ["truncate-weights", "flip-state", "drop-optimizer", "drop-manifest"])
def test_corruption_is_detected_and_reported(tmp_path: Path, tiny, damage):
    model, opt = tiny
    store = CheckpointStore(tmp_path)
    path = store.save(model, opt, NodeState(round=2))
    if damage == "truncate-weights":
        f = path / "adapter_model.safetensors"
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "flip-state":
        (path / "state.json").write_text('{"round": 99}')
    elif damage == "drop-optimizer":
        (path / "optimizer.pt").unlink()
    else:
        (path / "MANIFEST.json").unlink()
    with pytest.raises(CheckpointDamaged, match="damaged"):
        store.load_state(store.latest())
    # Nothing older to go back to: the damaged one is set aside, kept, and the line starts again.
    found, passed = store.resume_point()
    assert found is None and len(passed) == 1 and "round-000002 is damaged" in passed[0]
    assert (tmp_path / "damaged-round-000002").is_dir() and not (tmp_path / "LATEST").exists()
    assert store.save(model, opt, NodeState(round=1)).name == "round-000001"


def _damage(path: Path) -> None:
    f = path / "adapter_model.safetensors"
    blob = bytearray(f.read_bytes())
    blob[len(blob) // 2] ^= 0xFF  # one flipped bit's worth: what a failing disk does
    f.write_bytes(bytes(blob))


def test_a_damaged_checkpoint_is_set_aside_and_the_one_before_resumes(tmp_path: Path, tiny):
    model, opt = tiny
    store = CheckpointStore(tmp_path)
    for r in (1, 2, 3):
        store.save(model, opt, NodeState(round=r, history=[{"round": r}]))
    _damage(tmp_path / "round-000003")
    damaged_bytes = (tmp_path / "round-000003" / "adapter_model.safetensors").read_bytes()
    # export's look (a node may be running): nothing on disk moves
    found, passed = store.resume_point(set_aside=False)
    assert found == tmp_path / "round-000002" and passed == [
        "checkpoint round-000003 is damaged (adapter_model.safetensors is missing or does not match its manifest); "
        "passed over"]
    assert store.latest().name == "round-000003"
    # a node's: set aside, kept byte for byte, and LATEST names the one it resumes from
    found, passed = store.resume_point()
    assert found == tmp_path / "round-000002" and passed[0].endswith("set aside as damaged-round-000003")
    assert store.latest() == found and store.load_state(found).history == [{"round": 2}]
    assert (tmp_path / "damaged-round-000003" / "adapter_model.safetensors").read_bytes() == damaged_bytes
    # training goes on: round 3 again, and pruning never takes the damaged copy
    store.save(model, opt, NodeState(round=3))
    store.save(model, opt, NodeState(round=4))
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
        "damaged-round-000003", "round-000003", "round-000004"]


def test_a_checkpoint_newer_than_latest_is_not_current(tmp_path: Path, tiny):
    """A save killed after its rename and before LATEST moved: the node goes on from LATEST's."""
    model, opt = tiny
    store = CheckpointStore(tmp_path)
    store.save(model, opt, NodeState(round=1))
    store.save(model, opt, NodeState(round=2))
    (tmp_path / "LATEST").write_text("round-000001\n")
    assert store.resume_point() == (tmp_path / "round-000001", [])


def test_a_checkpoint_moved_away_resumes_from_the_one_before(tmp_path: Path, tiny):
    """What a volunteer did when told to move a damaged folder away: LATEST then named a folder that was gone,
    and the advice that followed (delete LATEST) started training over and pruned the older checkpoint."""
    model, opt = tiny
    store = CheckpointStore(tmp_path)
    store.save(model, opt, NodeState(round=1))
    store.save(model, opt, NodeState(round=2))
    (tmp_path / "round-000002").rename(tmp_path.parent / "elsewhere")
    assert store.resume_point() == (tmp_path / "round-000001", ["checkpoint round-000002, the newest, is gone"])
    assert store.latest().name == "round-000001"
    # LATEST deleted by hand: the newest checkpoint there is still found
    (tmp_path / "LATEST").unlink()
    assert store.resume_point() == (tmp_path / "round-000001", [])


def test_pointer_to_a_missing_checkpoint_with_none_before_it_is_an_error(tmp_path: Path):
    (tmp_path / "LATEST").write_text("round-000007\n")
    with pytest.raises(SapoError, match="missing checkpoint"):
        CheckpointStore(tmp_path).latest()
    with pytest.raises(SapoError, match="missing checkpoint"):  # perhaps about to be put back: nothing is decided
        CheckpointStore(tmp_path).resume_point()
    assert (tmp_path / "LATEST").read_text() == "round-000007\n"


def test_a_manifest_of_another_format_is_an_error_not_damage(tmp_path: Path, tiny):
    import json

    model, opt = tiny
    store = CheckpointStore(tmp_path)
    path = store.save(model, opt, NodeState(round=1))
    manifest = json.loads((path / "MANIFEST.json").read_text())
    del manifest["optimizer.pt"]
    (path / "MANIFEST.json").write_text(json.dumps(manifest))
    with pytest.raises(SapoError, match="another format") as err:
        store.resume_point()
    assert not isinstance(err.value, CheckpointDamaged) and path.is_dir()


def test_a_leftover_folder_is_replaced_but_the_current_checkpoint_never_rewritten(tmp_path: Path, tiny):
    model, opt = tiny
    store = CheckpointStore(tmp_path)
    store.save(model, opt, NodeState(round=1))
    (tmp_path / "round-000002").mkdir()  # renamed into place, then killed before LATEST moved
    (tmp_path / "round-000002" / "junk").write_text("x")
    path = store.save(model, opt, NodeState(round=2))
    assert not (path / "junk").exists() and store.latest() == path
    with pytest.raises(RuntimeError, match="current checkpoint"):
        store.save(model, opt, NodeState(round=2))
    store.verify(path)  # still intact


def test_each_model_keeps_its_own_checkpoints_and_a_flat_data_dir_is_moved_into_its_model(tmp_path: Path, tiny):
    from engine.learning.checkpoint import model_folder, model_store, model_stores

    model, opt = tiny
    data = tmp_path / "data"
    # A data dir of before per-model folders: one model's checkpoints in checkpoints/ itself.
    CheckpointStore(data / "checkpoints").save(model, opt, NodeState(round=2, model="smollm2-135m"))
    (data / "events.jsonl").write_text('{"type": "round", "round": 1}\n')  # its round history, in the data dir then
    mine = model_store(data, "smollm2-135m")
    assert (mine.root / "events.jsonl").read_text().startswith('{"type": "round"') and not (data / "events.jsonl").exists()
    assert mine.root == data / "checkpoints" / "smollm2-135m" and mine.latest().name == "round-000002"
    assert sorted(p.name for p in (data / "checkpoints").iterdir()) == ["smollm2-135m"]
    other = model_store(data, "Qwen2.5 0.5B/instruct")  # another model: starts with nothing of the first
    assert other.latest() is None and other.root.name == model_folder("Qwen2.5 0.5B/instruct") == "Qwen2.5-0.5B-instruct"
    other.save(model, opt, NodeState(round=1, model="Qwen2.5 0.5B/instruct"))
    assert list(model_stores(data)) == ["Qwen2.5-0.5B-instruct", "smollm2-135m"]  # newest first
    assert model_store(data, "smollm2-135m").load_state(mine.latest()).round == 2  # switching back finds it


def test_a_move_killed_half_way_is_finished_at_the_next_start(tmp_path: Path, tiny):
    import os

    from engine.learning.checkpoint import model_store

    model, opt = tiny
    data = tmp_path / "data"
    CheckpointStore(data / "checkpoints").save(model, opt, NodeState(round=4, model="m"))
    os.replace(data / "checkpoints", data / ".checkpoints-moving")  # the first of the move's two renames, then a kill
    assert model_store(data, "m").latest().name == "round-000004"
    assert not (data / ".checkpoints-moving").exists()


def test_an_unreadable_flat_checkpoint_is_reported_and_not_moved(tmp_path: Path, tiny):
    from engine.learning.checkpoint import model_store

    model, opt = tiny
    data = tmp_path / "data"
    path = CheckpointStore(data / "checkpoints").save(model, opt, NodeState(round=1, model="m"))
    (path / "state.json").write_text("{half")
    with pytest.raises(SapoError, match="corrupt"):
        model_store(data, "m")
    assert (data / "checkpoints" / "LATEST").is_file()  # left where it was, for the volunteer to look at


def test_an_older_version_run_on_a_newer_data_dir_is_sorted_out(tmp_path: Path, tiny):
    """Flat checkpoints of one model beside another model's folder: the flat ones go to their model's folder,
    the other folder stays where it is."""
    from engine.learning.checkpoint import model_store, model_stores

    model, opt = tiny
    data = tmp_path / "data"
    model_store(data, "b").save(model, opt, NodeState(round=5, model="b"))
    CheckpointStore(data / "checkpoints").save(model, opt, NodeState(round=2, model="a"))  # an older version's
    assert model_store(data, "a").latest().name == "round-000002"
    assert sorted(model_stores(data)) == ["a", "b"] and model_store(data, "b").latest().name == "round-000005"
