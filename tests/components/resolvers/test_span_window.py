"""SpanWindowStrategy: newest artifact per span, range, cap, and gate-passed filtering."""

from tfx.types import standard_artifacts

from components.resolvers.span_window import SpanWindowStrategy


def _artifact(id_: int, span: int | None):
    a = standard_artifacts.Examples()
    a.id = id_
    if span is not None:
        a.set_int_custom_property("span", span)
    return a


def test_keeps_newest_per_span_within_range_newest_first():
    arts = [_artifact(1, 201610), _artifact(2, 201611), _artifact(5, 201611), _artifact(3, 201612),
            _artifact(4, 201701), _artifact(6, None)]
    chosen = SpanWindowStrategy(201610, 201612).select(arts)
    assert [a.id for a in chosen] == [3, 5, 1]


def test_max_spans_picks_the_previous_span():
    arts = [_artifact(1, 201609), _artifact(2, 201611)]
    assert [a.id for a in SpanWindowStrategy(201601, 201611, max_spans=1).select(arts)] == [2]


def test_require_key_drops_spans_without_a_passed_gate_report():
    examples = [_artifact(1, 201610), _artifact(2, 201611), _artifact(3, 201612)]
    reports = [_artifact(10, 201610), _artifact(12, 201612)]
    strategy = SpanWindowStrategy(201601, 201612, require_key="reports")
    out = strategy.resolve_artifacts(None, {"examples": examples, "reports": reports})
    assert [a.id for a in out["examples"]] == [3, 1]
    assert [a.id for a in out["reports"]] == [12, 10]


def test_quarantined_spans_leave_the_window_until_released(tmp_path):
    from core import metadata
    from governance import quarantine

    path = metadata.parse("sqlite", str(tmp_path / "metadata.sqlite"))
    examples = [_artifact(1, 201610), _artifact(2, 201611), _artifact(3, 201612)]
    reports = [_artifact(10, 201610), _artifact(11, 201611), _artifact(12, 201612)]
    strategy = SpanWindowStrategy(201601, 201612, require_key="reports", pipeline_name="taxi")

    def window():
        store = metadata.open_store(path, readonly=True)
        return [a.id for a in strategy.resolve_artifacts(store, {"examples": examples, "reports": reports})["examples"]]

    quarantine.record(path, "taxi", 201611, "quarantine", "miles recorded in km", by="reviewer")
    quarantine.record(path, "other", 201612, "quarantine", "another pipeline's decision")
    assert window() == [3, 1]
    # A baseline look-up (one span before 201612) skips it too.
    baseline = SpanWindowStrategy(201601, 201611, max_spans=1, pipeline_name="taxi")
    store = metadata.open_store(path, readonly=True)
    assert [a.id for a in baseline.resolve_artifacts(store, {"report": reports})["report"]] == [10]
    quarantine.record(path, "taxi", 201611, "release", "re-uploaded in miles", by="reviewer")
    assert window() == [3, 2, 1]
    history = quarantine.decisions(metadata.open_store(path, readonly=True), "taxi")
    assert [(d["action"], d["decided_by"], d["reason"]) for d in history] == [
        ("quarantine", "reviewer", "miles recorded in km"), ("release", "reviewer", "re-uploaded in miles")]


def test_quarantine_refuses_repeats_and_empty_reasons(tmp_path):
    import pytest

    from core import metadata
    from governance import quarantine

    path = metadata.parse("sqlite", str(tmp_path / "m.sqlite"))
    with pytest.raises(ValueError, match="a reason is required"):
        quarantine.record(path, "taxi", 201611, "quarantine", "  ")
    with pytest.raises(ValueError, match="is not quarantined"):
        quarantine.record(path, "taxi", 201611, "release", "nothing to release")
    quarantine.record(path, "taxi", 201611, "quarantine", "bad")
    with pytest.raises(ValueError, match="already quarantined"):
        quarantine.record(path, "taxi", 201611, "quarantine", "bad again")
