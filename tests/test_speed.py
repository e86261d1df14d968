"""Round-time estimates, the speed-weighed recommendation, the models report, the no-network fallback."""

from __future__ import annotations

import msgspec
import pytest

from engine.models.catalog import CATALOG, GiB, by_name
from engine.run.event_log import EventLog
from engine.models.hardware import TARGET_ROUND_S, Hardware, recommend
from engine.commands.models import build_report
from engine.commands.speed import CACHE_VERSION, Speed, estimate_round_s, load_cached
from wire import events as ev
from wire.models import decode_report, encode_report


def _cpu(cores: int = 2, ram_gib: float = 24) -> Hardware:
    return Hardware("Linux 6.8", "x86_64", "Test CPU", cores, cores, int(ram_gib * GiB), int(ram_gib * GiB / 2))


def _speed(gen: float, train: float) -> Speed:
    return Speed(gen, train, 2, 0.0)


def test_estimates_scale_with_parameters():
    fast = _speed(150, 600)
    small, bigger = by_name("smollm2-360m"), by_name("qwen2.5-0.5b")
    assert small is not None and bigger is not None
    ratio = estimate_round_s(bigger, fast) / estimate_round_s(small, fast)
    assert ratio == pytest.approx(bigger.n_params / small.n_params)  # same (non-tiny) settings: time follows size
    assert estimate_round_s(small, _speed(75, 300)) == pytest.approx(2 * estimate_round_s(small, fast))


def test_speed_weighs_the_recommendation():
    hw = _cpu(cores=2)
    assert recommend(hw).entry.name == "qwen2.5-0.5b"  # memory and the core rule alone
    fast = lambda e: estimate_round_s(e, _speed(2000, 8000))  # noqa: E731
    slow = lambda e: estimate_round_s(e, _speed(50, 60))  # noqa: E731
    assert recommend(hw, round_s=fast).entry.name == "qwen2.5-0.5b"
    pick = recommend(hw, round_s=slow)
    assert slow(pick.entry) <= TARGET_ROUND_S < slow(by_name("smollm2-360m"))
    assert pick.entry.name == "smollm2-135m" and "also fits but a round would take" in pick.reason
    hopeless = recommend(hw, round_s=lambda e: 1e6 + e.n_params)
    assert hopeless.entry.name == "smollm2-135m" and "fastest model that fits" in hopeless.reason


def test_models_report_round_trips_and_marks_fit():
    report = build_report(_cpu(cores=2, ram_gib=8), _speed(100, 150))
    again = decode_report(encode_report(report))
    assert again == report
    fits = {m.name: m.fit for m in report.models}
    assert fits["smollm2-135m"] == "fits" and fits["qwen2.5-7b"] == "no"
    assert [m.name for m in report.models if m.recommended] == [report.recommended]
    assert all(m.round_s is not None for m in report.models)
    assert next(m for m in report.models if m.bundled).downloaded
    assert build_report(_cpu(), None).models[0].round_s is None  # not measured: no times


def test_speed_cache_is_per_thread_count(tmp_path):
    (tmp_path / "speed.json").write_text(msgspec.json.encode(
        {"gen_tokens_per_s": 1.0, "train_tokens_per_s": 2.0, "threads": 2, "measured_at": 0.0, "how": "x",
         "version": CACHE_VERSION}).decode())
    assert load_cached(tmp_path, 2) == Speed(1.0, 2.0, 2, 0.0, "x")
    assert load_cached(tmp_path, 4) is None
    # A measurement from before the last change to what is measured is not reused.
    (tmp_path / "speed.json").write_text(msgspec.json.encode(
        {"gen_tokens_per_s": 1.0, "train_tokens_per_s": 2.0, "threads": 2, "measured_at": 0.0, "how": "x",
         "version": CACHE_VERSION - 1}).decode())
    assert load_cached(tmp_path, 2) is None
    (tmp_path / "speed.json").write_text("{broken")
    assert load_cached(tmp_path, 2) is None


def test_no_model_and_no_network_means_the_bundled_model_at_once(monkeypatch):
    from engine.models import download
    from engine.models import hardware
    from engine.models import prepare

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hardware, "detect", lambda: _cpu(cores=2))  # a machine whose pick is qwen2.5-0.5b
    assert download.cached_path(by_name("qwen2.5-0.5b")) is None  # never downloaded here
    said: list = []
    log = EventLog()
    log.add(said.append)
    path, name = prepare.resolve_model_file(None, log)
    assert name == "smollm2-135m" and path.is_file()
    assert len(said) == 1 and isinstance(said[0], ev.Status)
    assert said[0].message.startswith("Qwen2.5 0.5B Instruct is recommended for this computer but is not downloaded")
    assert "using the bundled SmolLM2 135M" in said[0].message


def test_catalog_has_one_bundled_model():
    assert sum(e.bundled for e in CATALOG) == 1


def test_models_under_their_own_terms_say_so_and_are_never_the_pick():
    report = build_report(_cpu(cores=8, ram_gib=64), None)
    gemma = [m for m in report.models if m.licence]
    assert gemma and all("Gemma Terms of Use" in m.licence and not m.recommended for m in gemma)


def _metrics(round_s: float, eval_s: float | None = None) -> dict:
    return {"round_s": round_s, "gen_tokens": 1000, "gen_s": 10.0, "train_s": 20.0, "train_prompt_tokens": 2000,
            "train_completion_tokens": 1000, "eval_s": eval_s}


def test_real_rounds_replace_the_estimate(tmp_path):
    """Issue 26 item 5: the probe's estimate said 'about 5 min', real rounds took 38-57 s; the cached estimate
    now follows the real rounds: the model's own round times, and rates scaled by size for the others."""
    from engine.commands.speed import record_round
    from engine.models.catalog import bundled_entry
    from engine.models.speed import save

    small, bigger = bundled_entry(), by_name("qwen2.5-0.5b")
    probe = Speed(10.0, 20.0, 2, 0.0)  # a slow probe: minutes per round
    save(tmp_path, probe)
    assert estimate_round_s(small, probe) > 120
    for s in (40.0, 57.0, 38.0, 300.0):  # a slow outlier; the median stands
        record_round(tmp_path, 2, small.name, small.n_params, _metrics(s))
    assert record_round(tmp_path, 2, small.name, small.n_params, _metrics(500.0, eval_s=60.0)) is None  # a test
    speed = load_cached(tmp_path, 2)
    assert speed is not None and speed.how == f"real rounds of {small.name}"
    assert estimate_round_s(small, speed) == pytest.approx(48.5)  # median of 38, 40, 57, 300
    assert (speed.gen_tokens_per_s, speed.train_tokens_per_s) == (100.0, 150.0)  # this round's rates
    assert estimate_round_s(bigger, speed) == pytest.approx(estimate_round_s(bigger, Speed(100.0, 150.0, 2, 0.0)))
    report = build_report(_cpu(), speed, offline=False)
    assert next(m for m in report.models if m.name == small.name).round_s == 48.5
    assert report.speed is not None and report.speed.how.startswith("real rounds")
    # Rounds with another thread count leave an estimate for this one alone.
    assert record_round(tmp_path, 4, small.name, small.n_params, _metrics(10.0)) is None
    assert load_cached(tmp_path, 2) == speed


def test_offline_the_recommendation_is_a_model_on_disk():
    hw = _cpu(cores=2)
    online = build_report(hw, None, offline=False)
    assert online.recommended == "qwen2.5-0.5b" and not online.offline
    offline = build_report(hw, None, offline=True)
    assert offline.offline and offline.recommended == "smollm2-135m"  # qwen is not downloaded here
    assert "only models already on this computer" in offline.reason


def test_only_rounds_of_the_estimates_size_refine_it():
    from engine.models.catalog import bundled_entry
    from engine.models.speed import estimated_shape

    tiny = bundled_entry().n_params
    assert estimated_shape(4, 96, 8, tiny)  # the auto defaults for a tiny model, I + J = 4 + 4
    assert not estimated_shape(4, 24, 4, tiny)  # a test's small rounds would make the estimate wrong for all
    assert estimated_shape(8, 256, 8, by_name("qwen2.5-1.5b").n_params)  # larger models: L = 8, 256 tokens
