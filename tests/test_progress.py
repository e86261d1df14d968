"""Phase progress events (rate-limited), the answer feed, the swarm event: pure pieces of a node's reporting."""

from __future__ import annotations

from engine.tasks.groups import Completion, ScoredGroup
from engine.run.progress import PhaseReporter, feed_samples
from engine.tasks.rewards import Score
from engine.run.node import swarm_event
from engine.tasks.questions import Question
from wire import events as ev
from wire.identity import display_name
from wire.protocol import LeaderboardRow, StatsReply, TaskSpec


def test_phase_reporter_limits_the_rate_but_never_drops_starts_and_ends():
    said: list = []
    now = [0.0]
    r = PhaseReporter(said.append, every_s=0.3, clock=lambda: now[0])
    r.start(1, "generating", 16)
    for done in range(1, 17):
        now[0] += 0.05
        r.progress(done, 16)
    assert [e.done for e in said] == [0, 6, 12, 16]  # the first, one per 0.3 s, and the last
    r.progress(16, 16)  # the same count again: nothing new to say
    assert len(said) == 4
    r.start(1, "training")
    r.progress(1, 2)  # too soon after the start: skipped
    r.progress(2, 2)  # the end: always
    assert [(e.phase, e.done, e.total) for e in said[-2:]] == [("training", 0, 0), ("training", 2, 2)]


def _group(source: str, texts: list[str], rewards: list[float]) -> ScoredGroup:
    q = Question(TaskSpec(dataset="basic_arithmetic", seed=1, index=0, config={}), "What is  2 + 2?\n" + "x" * 400,
                 "4", {})
    return ScoredGroup(q, [1], [Completion(t, [1], "eog") for t in texts],
                       [Score(r, 1.0 if r >= 1 else 0.0, r >= 1, True) for r in rewards], source=source)


def test_feed_takes_the_best_answer_of_own_and_received_groups():
    own = [_group("local", ["<answer>3</answer>", "<answer>4</answer>"], [0.1, 1.1])]
    theirs = [_group("ab" * 16, ["no tag", "<answer>5</answer>"], [0.0, 0.1])]
    feed = feed_samples(own, theirs)
    assert [(s.source, s.answer, s.reward, s.correct) for s in feed] == [
        ("own", "4", 1.1, True), (display_name("ab" * 16), "5", 0.1, False)]
    assert feed[0].question.startswith("What is 2 + 2? x") and len(feed[0].question) == 300  # cut, whitespace folded


def test_swarm_event_ranks_this_node_and_names_peers_from_their_ids():
    me, other = "ab" * 16, "cd" * 16
    row = lambda node, shared, adopted: LeaderboardRow(node_id=node, groups_shared=shared,  # noqa: E731
                                                       groups_adopted=adopted, rounds=3, mean_reward=0.5,
                                                       last_seen=1.0)
    stats = StatsReply(peers_online=2, groups_per_minute=1.234, leaderboard=[row(other, 9, 5), row(me, 4, 2)],
                       you=row(me, 4, 2))
    e = swarm_event(stats, me)
    assert isinstance(e, ev.Swarm) and e.rank == 2 and e.peers_online == 2 and e.groups_per_minute == 1.23
    assert [r.name for r in e.leaderboard] == [display_name(other), display_name(me)]
    assert e.you is not None and (e.you.groups_shared, e.you.groups_adopted) == (4, 2)
