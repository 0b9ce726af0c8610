"""Span layout: parsing, month arithmetic, discovery and the early CSV checks."""

import os

import pytest

from core import spans
from tests.conftest import TAXI_DATA


def test_parse_span_accepts_month_forms():
    assert spans.parse_span("201612") == 201612
    assert spans.parse_span("2016-12") == 201612
    assert spans.parse_span(201601) == 201601


@pytest.mark.parametrize("bad", ["2016", "201613", "201600", "abc", "2016-1"])
def test_parse_span_rejects_non_months(bad):
    with pytest.raises(spans.SpanError, match="not a month"):
        spans.parse_span(bad)


def test_shift_and_window_cross_year_boundaries():
    assert spans.shift_span(201601, -1) == 201512
    assert spans.shift_span(201612, 1) == 201701
    assert spans.shift_span(201603, -15) == 201412
    assert spans.window(201602, 6) == (201509, 201602)
    with pytest.raises(spans.SpanError):
        spans.window(201602, 0)


def test_embedded_data_has_monthly_spans():
    found = spans.list_spans(TAXI_DATA)
    assert found[0] == 201301 and found[-1] == 201612
    assert len(found) == 48  # every month of 2013-2016
    rows = sum(
        sum(1 for _ in open(os.path.join(spans.span_dir(TAXI_DATA, s), "data.csv"))) - 1
        for s in found
    )
    assert rows == 15002  # the whole TFX taxi sample, nothing lost in the split


def test_resolve_span_latest_and_unknown(tmp_path):
    for s in (201611, 201612):
        spans.write_span(str(tmp_path), s, ["a"], [["1"]])
    assert spans.resolve_span(str(tmp_path), None) == 201612
    with pytest.raises(spans.SpanError, match="span 201701 not found.*201611..201612"):
        spans.resolve_span(str(tmp_path), 201701)


def test_missing_and_empty_data_folders(tmp_path):
    with pytest.raises(spans.SpanError, match="does not exist"):
        spans.list_spans(str(tmp_path / "nope"))
    with pytest.raises(spans.SpanError, match="no span folders"):
        spans.list_spans(str(tmp_path))


def test_unreadable_csv_is_named(tmp_path):
    folder = tmp_path / "span-201612"
    folder.mkdir()
    (folder / "data.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(spans.SpanError, match="cannot read .*data.csv"):
        spans.check_span_csv(str(folder))
    (folder / "data.csv").write_text("a,b\n")
    with pytest.raises(spans.SpanError, match="no data rows"):
        spans.check_span_csv(str(folder))


def test_split_csv_by_month_never_overwrites(tmp_path):
    src = tmp_path / "all.csv"
    # 2016-12-01T00:00Z and 2016-11-30T23:59Z fall in different months.
    src.write_text("x,trip_start_timestamp\n1,1480550400\n2,1480550340\n")
    out = tmp_path / "spans"
    assert spans.split_csv_by_month(str(src), str(out)) == {201611: 1, 201612: 1}
    before = (out / "span-201612" / "data.csv").read_text()
    with pytest.raises(spans.SpanError, match="already exist"):
        spans.split_csv_by_month(str(src), str(out))
    assert (out / "span-201612" / "data.csv").read_text() == before
