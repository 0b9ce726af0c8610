"""SpanWindowStrategy: newest artifact per span, range, cap, and gate-passed filtering."""

from tfx.types import standard_artifacts

from components.span_window import SpanWindowStrategy


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
