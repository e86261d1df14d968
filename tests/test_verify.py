"""Verification of peers' groups: genuine ones pass, poisoned ones are caught. Pure."""

from __future__ import annotations

import msgspec
import pytest

from engine.tasks import QuestionStream, build_mix
from engine.verify import verify_group
from wire.protocol import Group, TaskSpec


@pytest.fixture(scope="module")
def genuine() -> Group:
    q = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), "e" * 32, 0, []).draw(1)[0]
    right, wrong = f"<answer>{q.answer}</answer>", "<answer>999</answer>"
    return Group(spec=q.spec, question=q.question, answer=q.answer, completions=[right, wrong, "no tag", right],
                 rewards=[1.1, 0.1, 0.0, 1.1], model="peer-model", round=3)


def test_genuine_group_is_accepted_and_rescored_with_our_bonus(genuine):
    v = verify_group(genuine, format_bonus=0.0)
    assert v.ok
    assert [s.reward for s in v.scores] == [1.0, 0.0, 0.0, 1.0]
    assert v.question is not None and v.question.question == genuine.question


def test_sender_without_format_bonus_is_fine_too(genuine):
    plain = msgspec.structs.replace(genuine, rewards=[1.0, 0.0, 0.0, 1.0])
    assert verify_group(plain, format_bonus=0.1).ok


@pytest.mark.parametrize("poison, reason", [
    ({"question": "Calculate 1 + 1."}, "question_mismatch"),
    ({"answer": "12345"}, "answer_mismatch"),
    ({"rewards": [1.1, 1.1, 0.0, 1.1]}, "reward_mismatch"),      # a wrong answer claimed right
    ({"rewards": [1.1, 0.1, 0.5, 1.1]}, "reward_mismatch"),      # an untagged answer paid
    ({"rewards": [1.1, 0.3, 0.0, 1.1]}, "reward_mismatch"),      # two different format bonuses
    ({"rewards": [1.9, 0.1, 0.0, 1.9]}, "reward_mismatch"),      # bonus beyond any honest setting
])
def test_poisoned_groups_are_rejected(genuine, poison, reason):
    assert verify_group(msgspec.structs.replace(genuine, **poison), 0.0).reason == reason


def test_unknown_or_invalid_spec_is_rejected(genuine):
    bad = msgspec.structs.replace(genuine, spec=TaskSpec(dataset="no_such_dataset", config={}, seed=1, index=0))
    assert verify_group(bad, 0.0).reason == "bad_spec"
    bad = msgspec.structs.replace(genuine, spec=TaskSpec(dataset="basic_arithmetic", config={"max_terms": "x"}, seed=1, index=0))
    assert verify_group(bad, 0.0).reason == "bad_spec"
