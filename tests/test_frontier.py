"""The learnable frontier (engine/tasks/frontier.py): levels, their moves, ladders, draws, admission, selection."""

from __future__ import annotations

import itertools
import json
import random

import msgspec
import pytest

from engine.lab.experiment import config_overrides
from engine.sharing.selection import Candidate, rank
from engine.tasks import frontier
from engine.tasks.caps import ANY_TASK_CAPS, config_within_caps
from engine.tasks.frontier import MIN_GRADED, TaskLevel, next_level, update, update_levels
from engine.tasks.questions import (Prompts, Question, QuestionStream, StreamState, TaskEntry, admit, build_mix,
                                    heldout_set, question_key, regenerate)
from wire.protocol import TaskSpec

MIXES = [(preset, entry) for preset in ("easy", "paper") for entry in build_mix(preset)]


# --- moves -------------------------------------------------------------------------------

def test_next_level_moves_at_most_one_step_and_stays_within_0_and_top():
    for level, success, graded, top in itertools.product(range(-2, 8), [None, 0.0, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0],
                                                         [0, MIN_GRADED - 1, MIN_GRADED, 50], [0, 1, 5]):
        new = next_level(level, success, graded, top)
        assert 0 <= new <= top
        if 0 <= level <= top:
            assert abs(new - level) <= 1


def test_next_level_waits_for_enough_groups_and_holds_in_the_middle():
    assert next_level(2, 1.0, MIN_GRADED - 1, 5) == 2  # too few graded groups: no move, however clear
    assert next_level(2, 0.0, MIN_GRADED - 1, 5) == 2
    assert next_level(2, 1.0, MIN_GRADED, 5) == 3
    assert next_level(2, 0.0, MIN_GRADED, 5) == 1
    for success in (0.3, 0.5, 0.7):  # hysteresis: between the thresholds the level holds
        assert next_level(2, success, 100, 5) == 2
    assert next_level(5, 1.0, 100, 5) == 5 and next_level(0, 0.0, 100, 5) == 0  # the ends hold


def test_update_averages_until_a_move_then_starts_afresh():
    state = TaskLevel()
    state = update(state, 1.0, 2, top=3)  # 2 groups graded: not enough to move
    assert state == TaskLevel(0, 1.0, 2)
    state = update(state, 0.5, 2, top=3)  # average 0.85 over 4 groups: up
    assert state == TaskLevel(1)
    assert update(state, 0.9, 0, top=3) == state  # no groups of the task this round: nothing changes
    hopeless = TaskLevel(1)
    for _ in range(2):
        hopeless = update(hopeless, 0.0, 2, top=3)
    assert hopeless == TaskLevel(0)


def test_update_levels_reports_moves_and_keeps_other_tasks():
    levels = {"gcd": {"level": 2, "success": 0.9, "graded": 10}, "chain_sum": {"level": 1, "success": 0.5, "graded": 3}}
    out, moves = update_levels(levels, {"gcd": (1.0, 2)}, {"gcd": 4, "chain_sum": 5})
    assert moves == {"gcd": 1}
    assert out["gcd"] == {"level": 3, "success": None, "graded": 0}
    assert out["chain_sum"] == levels["chain_sum"]
    out, moves = update_levels({}, {"gcd": (1.0, 8)}, {"gcd": 0})  # a task without levels stays at 0
    assert moves == {} and out["gcd"]["level"] == 0


# --- ladders -----------------------------------------------------------------------------

@pytest.mark.parametrize("preset,entry", MIXES, ids=[f"{p}-{e.dataset}" for p, e in MIXES])
def test_every_level_of_every_preset_task_is_valid_capped_and_generates(preset, entry):
    rungs = frontier.ladder(entry.dataset, entry.config)
    assert rungs[0] == entry.config  # level 0: the mix's settings
    assert len({json.dumps(r, sort_keys=True) for r in rungs}) == len(rungs)
    for level, config in enumerate(rungs):
        assert frontier.config_at(entry.dataset, entry.config, level) == config
        assert frontier.level_of(entry.dataset, entry.config, config) == level
        if level:
            assert config_within_caps(entry.dataset, config), config
        q = regenerate(TaskSpec(dataset=entry.dataset, config=config, seed=3, index=5))
        assert q.question
    top = frontier.top_level(entry.dataset, entry.config)
    assert frontier.config_at(entry.dataset, entry.config, top + 3) == rungs[top]  # clamped
    assert frontier.config_at(entry.dataset, entry.config, -1) == rungs[0]


def test_the_easy_preset_has_room_to_climb_in_small_steps():
    tops = {e.dataset: frontier.top_level(e.dataset, e.config) for e in build_mix("easy")}
    assert all(top >= 2 for top in tops.values()), tops
    rungs = frontier.ladder("chain_sum", build_mix("easy", tasks=["chain_sum"])[0].config)
    assert rungs[1] == {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}  # one attribute a step
    assert rungs[2]["max_digits"] == 2 and rungs[2]["max_terms"] == 3


def test_a_task_without_caps_or_curriculum_stays_at_level_0():
    assert "leg_counting" not in ANY_TASK_CAPS
    assert frontier.top_level("leg_counting", {}) == 0
    assert frontier.top_level("basic_arithmetic", {}) == 0  # reasoning-gym's defaults: the curriculum's top already


# --- the node's stream, its checkpoint, admission, prompts --------------------------------------

def _mix_at(level: int) -> tuple[tuple[TaskEntry, ...], QuestionStream, list]:
    mix = build_mix("easy", tasks=["chain_sum"])
    held = heldout_set(mix, 16)
    stream = QuestionStream(mix, "f" * 32, 0, held)
    stream.state.levels["chain_sum"] = {"level": level, "success": None, "graded": 0}
    return mix, stream, held


def test_the_stream_draws_at_the_current_level_and_never_a_heldout_question():
    mix, stream, held = _mix_at(3)
    drawn = stream.draw(30)
    assert all(q.spec.config == frontier.config_at("chain_sum", mix[0].config, 3) for q in drawn)
    assert {question_key(q) for q in drawn}.isdisjoint(question_key(q) for q in held)
    assert all(q.spec.config == mix[0].config for q in held)  # the held-out set stays at level 0
    assert all(admit(q.spec, mix) is None for q in drawn)  # a peer with the same mix takes them


def test_the_second_lane_draws_at_the_main_lanes_level_as_it_moves():
    mix, stream, held = _mix_at(3)
    extra = QuestionStream(mix, "f" * 32, 0, held, lane="extra", levels_from=stream)
    assert all(q.spec.config == frontier.config_at("chain_sum", mix[0].config, 3) for q in extra.draw(10))
    stream.state.levels = {"chain_sum": {"level": 1, "success": None, "graded": 0}}  # as Node._move_levels sets it
    assert all(q.spec.config == frontier.config_at("chain_sum", mix[0].config, 1) for q in extra.draw(10))


def test_levels_survive_a_checkpoint_and_old_checkpoints_start_at_level_0():
    mix, stream, held = _mix_at(2)
    stream.draw(5)
    saved = msgspec.json.decode(msgspec.json.encode(stream.state))  # as state.json holds it
    resumed = QuestionStream(mix, "f" * 32, 0, held, state=StreamState(**saved))
    assert resumed.level("chain_sum") == 2
    assert [q.spec for q in resumed.draw(5)] == [q.spec for q in stream.draw(5)]
    old = {k: v for k, v in saved.items() if k != "levels"}
    assert QuestionStream(mix, "f" * 32, 0, held, state=StreamState(**old)).level("chain_sum") == 0


def test_admit_takes_any_level_of_an_own_task_and_nothing_off_the_ladder():
    mix = build_mix("easy", tasks=["chain_sum"])
    for config in frontier.ladder("chain_sum", mix[0].config):
        assert admit(TaskSpec(dataset="chain_sum", config=config, seed=1, index=0), mix) is None
    off = {"min_terms": 2, "max_terms": 5, "min_digits": 1, "max_digits": 1}  # within caps, not a level
    assert admit(TaskSpec(dataset="chain_sum", config=off, seed=1, index=0), mix) == "foreign_task"
    gcd_top = frontier.ladder("gcd", build_mix("easy", tasks=["gcd"])[0].config)[-1]
    assert admit(TaskSpec(dataset="gcd", config=gcd_top, seed=1, index=0), mix) == "foreign_task"  # not an own task


def test_prompts_show_examples_at_the_question_s_level():
    mix, stream, held = _mix_at(4)
    prompts = Prompts(mix, 2, frozenset(question_key(q) for q in held), render=lambda m: [len(m)])
    q = stream.draw(1)[0]
    messages = prompts.messages(q)
    assert len(messages) == 1 + 4 + 1  # system, two examples, the question
    peer = Prompts(mix, 2, frozenset(), render=lambda m: [len(m)])
    off = TaskSpec(dataset="chain_sum", config={"min_terms": 9}, seed=1, index=0)
    assert len(peer.messages(Question(off, "?", "", {}))) == 2  # off the ladder: no examples


# --- selection and the lab ----------------------------------------------------------------

def test_useful_selection_prefers_groups_from_the_receiver_s_frontier():
    far = Candidate("chain_sum", 0.5, 0.5, True, distance=3)
    near = Candidate("chain_sum", 0.25, 0.3, True, distance=0)
    assert rank([far, near], "useful", {}, random.Random(0)) == [1, 0]
    assert rank([far, Candidate("chain_sum", 0.25, 0.3, True)], "useful", {}, random.Random(0))[0] == 1
    same = [Candidate("chain_sum", 0.5, 0.5, True), Candidate("chain_sum", 0.25, 0.3, True)]
    assert rank(same, "useful", {}, random.Random(0)) == [0, 1]  # without distances: as before


def test_experiments_compare_with_and_without_the_frontier():
    assert config_overrides("alone", 2, 2)["frontier"] is False
    assert config_overrides("alone+frontier", 2, 2)["frontier"] is True
    assert config_overrides("swarm+useful+frontier", 2, 2)["frontier"] is True


# --- starting levels (task_levels) ----------------------------------------------------------

def test_starting_levels_outside_a_ladder_or_the_mix_are_one_line_errors():
    from engine.errors import SapoError

    mix = build_mix("easy")
    top = frontier.top_level("gcd", mix[-1].config)
    frontier.check_levels(mix, {"gcd": top, "chain_sum": 0})
    with pytest.raises(SapoError, match=f"gcd level {top + 1} is outside its ladder 0..{top}"):
        frontier.check_levels(mix, {"gcd": top + 1})
    with pytest.raises(SapoError, match="'bf' is not a task"):
        frontier.check_levels(mix, {"bf": 1})


def test_starting_levels_are_read_from_toml_and_written_back(tmp_path):
    from engine.config import NodeConfig, build_config, load_toml, to_toml
    from engine.errors import SapoError

    path = tmp_path / "node.toml"
    path.write_text("frontier = true\n[task_levels]\ngcd = 2\n")
    cfg = build_config(load_toml(path), {})
    assert cfg.frontier and cfg.task_levels == {"gcd": 2}
    path.write_text(to_toml(cfg))
    assert build_config(load_toml(path), {}) == cfg
    assert NodeConfig().task_levels == {} and NodeConfig().frontier is False
    with pytest.raises(SapoError, match="task levels must be >= 0"):
        build_config({"task_levels": {"gcd": -1}}, {})
