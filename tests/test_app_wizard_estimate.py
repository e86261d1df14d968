"""The wizard's model page before and without its speed test, offline, and after a failed download (issue 26
item 5). Real widgets offscreen; the engine's answers are given as reports (the engine side is in
tests/test_speed.py), so no child runs."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app import engine_tasks
from app.outcome import Outcome
from app.settings import AppSettings
from wire.models import HardwareInfo, ModelInfo, ModelsReport, SpeedInfo

HW = HardwareInfo(summary="2 cores", os="Linux", cpu_name="Test CPU", cpu_physical=2, cpu_logical=2,
                  ram_total=8 << 30, ram_available=4 << 30, device="cpu")


def _model(name: str, bundled: bool = False, downloaded: bool = False, round_s: float | None = None,
           recommended: bool = False) -> ModelInfo:
    return ModelInfo(name=name, display_name=name, n_params=1, file_size_bytes=676_000_000, quantization="Q8_0",
                     bundled=bundled, downloaded=downloaded or bundled, fit="fits", needed_bytes=1 << 30,
                     budget_bytes=4 << 30, round_s=round_s, recommended=recommended)


def _report(measured: bool = False, offline: bool = False, recommended: str = "qwen2.5-0.5b") -> ModelsReport:
    s = 45.0 if measured else None
    models = [_model("smollm2-135m", bundled=True, round_s=s, recommended=recommended == "smollm2-135m"),
              _model("qwen2.5-0.5b", round_s=s and 160.0, recommended=recommended == "qwen2.5-0.5b")]
    speed = SpeedInfo(100.0, 300.0, 2, "bundled model") if measured else None
    return ModelsReport(HW, models, recommended, "the largest model that fits", speed, offline)


@pytest.fixture
def wizard(qtbot, monkeypatch, tmp_path):
    from app.wizard import SetupWizard

    started: list[bool] = []
    monkeypatch.setattr(engine_tasks.ModelsQuery, "start", lambda self, measure=False, threads=None:
                        started.append(measure))
    w = SetupWizard(AppSettings(data_dir=str(tmp_path / "data")), cores=2, measure=True)
    qtbot.addWidget(w)
    w.started = started
    return w


def _rows(page) -> dict[str, int]:
    return {page.table.item(i, 0).data(Qt.ItemDataRole.UserRole): i for i in range(page.table.rowCount())}


def test_no_model_that_needs_a_download_is_preselected_while_the_speed_test_runs(wizard):
    wizard._on_report(_report())
    assert wizard.started == [False, True]  # the quick report, then the speed test
    page = wizard.model_page
    assert page.selected() == "smollm2-135m"  # on disk: Next leads to no download (was: Qwen 676 MB)
    assert "after the speed test" in page.reason.text()
    assert "s so far" in page.timing.text() and "about a minute" not in page.timing.text()
    wizard._on_timing(_report(measured=True))  # the test's answer: now the recommendation is selected
    assert page.selected() == "qwen2.5-0.5b" and page.reason.text().startswith("Recommended:")
    assert "rough estimates" in page.timing.text()


def test_offline_a_model_not_on_disk_cannot_be_chosen_and_says_why(wizard):
    wizard._on_report(_report(measured=True, offline=True, recommended="smollm2-135m"))
    page = wizard.model_page
    row = _rows(page)["qwen2.5-0.5b"]
    item = page.table.item(row, 0)
    assert not item.flags() & Qt.ItemFlag.ItemIsSelectable
    assert "offline" in item.toolTip() and "cannot be downloaded" in item.toolTip()
    assert page.table.item(row, 5).text() == "no, offline"
    assert page.selected() == "smollm2-135m"  # the recommendation offline: a model on disk
    page.table.selectRow(row)
    assert page.selected() != "qwen2.5-0.5b"
    assert "offline" in page.reason.text()


def test_a_failed_download_stops_its_bar_and_says_so_plainly(wizard):
    page = wizard.download_page
    page.bar.setRange(0, 0)  # busy while it downloads
    sentence = engine_tasks.download_failure_words(Outcome(
        "The download", exit_code=2, message="Qwen2.5 0.5B is not downloaded yet and offline mode is on "
                                             "(HF_HUB_OFFLINE); go online once or pass a local .gguf path"))
    page.download.done.emit(False, sentence)
    assert (page.bar.minimum(), page.bar.maximum(), page.bar.value()) == (0, 1, 0)  # stopped, not moving
    assert "HF_HUB_OFFLINE" not in page.text.text() and "set to work offline" in page.text.text()
    assert page.retry.isVisibleTo(page) and not page.isComplete()
