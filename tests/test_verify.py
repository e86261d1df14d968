"""Verification of peers' groups with the real pieces: the sandbox, the bundled model's tokenizer."""

from __future__ import annotations

import msgspec
import pytest

from engine.tasks.groups import Completion, ScoredGroup
from engine.tasks.rewards import make_score
from engine.sandbox.workers import Sandbox
from engine.tasks.questions import MAX_INDEX, QuestionStream, build_messages, build_mix, heldout_set
from engine.sharing.admission import Verifier, cap_external_tokens
from wire.protocol import Group, TaskSpec

MIX = build_mix("easy", tasks=["basic_arithmetic", "calendar_arithmetic"])


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(workers=2) as sb:
        yield sb


@pytest.fixture
def make_verifier(sandbox, llm):
    def make(**kw) -> Verifier:
        args = dict(tokenize=llm.tokenize, detokenize=llm.detokenize,
                    prompt_ids=lambda q: llm.prompt_tokens(build_messages(q.question, [])),
                    completions=4, max_tokens=64, format_bonus=0.0)
        heldout = kw.pop("heldout", [])
        return Verifier(MIX, heldout, sandbox, **(args | kw))
    return make


def _genuine(index: int = 0) -> Group:
    qs = QuestionStream(build_mix("easy", tasks=["basic_arithmetic"]), "e" * 32, 0, []).draw(index + 1)
    q = qs[index]
    right, wrong = f"<answer>{q.answer}</answer>", "<answer>999</answer>"
    return Group(spec=q.spec, question=q.question, answer=q.answer, completions=[right, wrong, "no tag", right],
                 rewards=[1.1, 0.1, 0.0, 1.1], model="peer-model", round=3)


def test_genuine_group_is_accepted_and_rescored_with_our_bonus(make_verifier):
    v = make_verifier().check(_genuine())
    assert v.ok and [s.reward for s in v.scores] == [1.0, 0.0, 0.0, 1.0]
    assert v.question is not None and v.question.question == _genuine().question
    assert all(c.token_ids for c in v.completions) and v.prompt_ids
    plain = msgspec.structs.replace(_genuine(), rewards=[1.0, 0.0, 0.0, 1.0])  # a sender without a bonus
    assert make_verifier(format_bonus=0.1).check(plain).ok


@pytest.mark.parametrize("poison, reason", [
    ({"question": "Calculate 1 + 1."}, "question_mismatch"),
    ({"answer": "12345"}, "answer_mismatch"),
    ({"rewards": [1.1, 1.1, 0.0, 1.1]}, "reward_mismatch"),      # a wrong answer claimed right
    ({"rewards": [1.1, 0.1, 0.5, 1.1]}, "reward_mismatch"),      # an untagged answer paid
    ({"rewards": [1.1, 0.3, 0.0, 1.1]}, "reward_mismatch"),      # two different format bonuses
    ({"rewards": [1.9, 0.1, 0.0, 1.9]}, "reward_mismatch"),      # bonus beyond any honest setting
])
def test_poisoned_groups_are_rejected(make_verifier, poison, reason):
    assert make_verifier().check(msgspec.structs.replace(_genuine(), **poison)).reason == reason


def test_specs_the_node_would_not_draw_are_refused_before_the_sandbox(make_verifier):
    g = _genuine()
    foreign = msgspec.structs.replace(g, spec=TaskSpec(dataset="binary_matrix", config={"max_n": 10**6}, seed=1, index=0))
    assert make_verifier().check(foreign).reason == "foreign_task"
    assert make_verifier(any_task=True).check(foreign).reason == "bad_spec"
    far = msgspec.structs.replace(g, spec=msgspec.structs.replace(g.spec, index=MAX_INDEX))
    assert make_verifier().check(far).reason == "bad_spec"


def test_a_group_trained_once_is_a_replay_after(make_verifier):
    v = make_verifier()
    g = _genuine()
    assert v.check(g).ok
    v.remember(g.spec)
    assert v.check(g).reason == "replay"
    assert v.check(msgspec.structs.replace(g, completions=g.completions[::-1], rewards=g.rewards[::-1])).reason == "replay"


def test_heldout_questions_are_refused_whatever_their_wording_or_seed(make_verifier):
    mix = build_mix("easy", tasks=["calendar_arithmetic"])
    held = heldout_set(mix, 16)
    verifier = make_verifier(heldout=held)
    q = held[3]
    yes, no = f"<answer>{q.answer}</answer>", "<answer>maybe</answer>"
    g = Group(spec=q.spec, question=q.question, answer=q.answer, completions=[yes, no], rewards=[1.0, 0.0], model="m")
    assert verifier.check(g).reason == "heldout"
    # Another seed that happens to ask about the same year is the same question.
    year = q.entry["metadata"]["year"]
    for seed in range(1, 4000):
        other = QuestionStream(mix, "%032x" % seed, 0, []).draw(1)[0]
        if other.entry["metadata"]["year"] == year:
            break
    else:
        pytest.skip("no other seed drew that year")
    g2 = Group(spec=other.spec, question=other.question, answer=other.answer,
               completions=[f"<answer>{other.answer}</answer>", no], rewards=[1.0, 0.0], model="m")
    assert verifier.check(g2).reason == "heldout"


def test_more_completions_than_L_are_subsampled_and_long_ones_cut(make_verifier, llm):
    g = _genuine()
    right = g.completions[0]
    long_right = "Let me think. " * 200 + right  # the right answer, far past max_tokens
    many = msgspec.structs.replace(g, completions=[right, "<answer>1</answer>"] * 4 + [long_right],
                                   rewards=[1.0, 0.0] * 4 + [1.0])
    v = make_verifier(completions=4, max_tokens=32).check(many)
    assert v.ok and len(v.completions) == len(v.scores) == 4
    assert all(len(c.token_ids) <= 32 for c in v.completions)
    cut = make_verifier(completions=4, max_tokens=32).check(
        msgspec.structs.replace(g, completions=[long_right, right, "<answer>7</answer>"], rewards=[1.0, 1.0, 0.0]))
    # Cut where our own answers would have ended: no answer left, scored 0, and its claim not held against it.
    assert cut.ok and cut.cut == 1 and cut.scores[0].task_score == 0.0 and len(cut.completions[0].token_ids) == 32
    assert cut.completions[0].text == llm.detokenize(llm.tokenize(long_right)[:32])


def test_a_prompt_over_the_cap_is_refused(make_verifier):
    assert make_verifier(max_prompt_tokens=8).check(_genuine()).reason == "too_long"


def _scored(n_tokens: int, source: str) -> ScoredGroup:
    q = QuestionStream(MIX, "e" * 32, 0, []).draw(1)[0]
    cs = [Completion("x", list(range(n_tokens)), "eog") for _ in range(2)]
    return ScoredGroup(q, [1], cs, [make_score(1.0, "x"), make_score(0.0, "x")], source=source)


def test_external_tokens_are_capped_to_their_share_longest_first():
    own = [_scored(10, "local") for _ in range(4)]  # 80 own tokens
    ext = [_scored(10, "a"), _scored(500, "b"), _scored(20, "c")]
    kept, dropped = cap_external_tokens(own, ext, 0.5)
    assert [g.source for g in kept] == ["a", "c"] and [g.source for g in dropped] == ["b"]
    kept, dropped = cap_external_tokens(own, ext, 0.2)  # 20 <= 0.2 * (80 + 20)
    assert [g.source for g in kept] == ["a"]
    assert cap_external_tokens(own, ext, 1.0) == (ext, [])
    assert cap_external_tokens([], ext, 0.5) == (ext, [])  # I = 0: nothing to weigh against


def test_each_sender_gets_a_bounded_share_of_the_sandbox_per_batch(make_verifier):
    """Senders' jobs run in waves, one per sender; a sender past its budget has the rest refused unscored."""
    groups = [_genuine(i) for i in range(5)] + [_genuine(0), _genuine(0)]
    senders = ["flood"] * 5 + ["honest", "other"]
    verdicts = make_verifier(sender_budget_s=1e-6).check_many(groups, senders)  # one job each, then spent
    assert [v.reason for v in verdicts] == [None] + ["sender_budget"] * 4 + [None, None]
    assert all(v.scores == [] for v in verdicts[1:5])  # never scored
    # honest groups fit the default budget many times over
    assert "sender_budget" not in [v.reason for v in make_verifier().check_many(groups, senders)]


def test_a_held_out_answer_stated_in_the_working_is_refused(make_verifier):
    """A peer's own question, with a held-out question and its answer slipped into a completion's working."""
    mix = build_mix("easy", tasks=["basic_arithmetic"])
    held = heldout_set(mix, 16)
    verifier = make_verifier(heldout=held)
    g = _genuine()
    h = next(x for x in held if x.answer != g.answer)
    expression = h.entry["metadata"]["expression"]
    for slipped in (f"By the way, {h.question} {h.answer}.", f"Note: {expression} = {h.answer}",
                    f"({expression.replace(' ', '')}={h.answer})"):
        leaky = msgspec.structs.replace(g, completions=[slipped + g.completions[0], *g.completions[1:]])
        assert verifier.check(leaky).reason == "heldout_leak", slipped
    # The expression without its answer, or a number that only contains it, is no leak.
    assert verifier.check(msgspec.structs.replace(g, completions=[f"Not {expression} = {h.answer}9. "
                                                                   + g.completions[0], *g.completions[1:]])).ok
    assert verifier.check(g).ok
