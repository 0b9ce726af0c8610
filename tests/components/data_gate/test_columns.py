"""Upstream column changes (components/data_gate/columns.py): the `columns:` policy and the
rename hint, on the embedded taxi months."""

import csv
import os
import shutil

import pytest

from components.data_gate import columns
from components.data_gate import policy as gate_policy
from core import spans

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TAXI = os.path.join(REPO, "data", "taxi")


def _months(tmp_path, rename=None, add=None, last=201612):
    """Two embedded months; the last one with a column renamed and/or one added."""
    root = tmp_path / "data"
    for span in (201611, last):
        shutil.copytree(os.path.join(TAXI, f"span-{span}"), root / f"span-{span}")
    path = root / f"span-{last}" / "data.csv"
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if rename:
        rows[0] = [rename.get(c, c) for c in rows[0]]
    if add:
        name, values = add
        rows = [rows[0] + [name]] + [r + [values(i)] for i, r in enumerate(rows[1:])]
    with open(path, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    return str(root), last


def test_the_policy_block_defaults_to_stop_and_names_a_bad_value():
    assert gate_policy.GatePolicy().columns_new == "stop"
    assert gate_policy.from_dict({"columns": {"new": "report"}}).columns_new == "report"
    assert gate_policy.from_dict(gate_policy.from_dict({"columns": {"new": "report"}}).to_json_dict()).columns_new == "report"
    with pytest.raises(gate_policy.PolicyError, match=r"columns.new: expected one of stop, report, got 'ignore'"):
        gate_policy.from_dict({"columns": {"new": "ignore"}}, "gate.yaml")
    with pytest.raises(gate_policy.PolicyError, match=r"columns: unknown field\(s\) missing"):
        gate_policy.from_dict({"columns": {"missing": "report"}}, "gate.yaml")


def test_a_renamed_numeric_column_is_named_with_its_old_name(tmp_path):
    root, span = _months(tmp_path, rename={"trip_miles": "trip_distance_miles"})
    header = list(csv.reader(open(os.path.join(spans.span_dir(root, span), "data.csv"))))[0]
    missing, new = columns.compare(header, list(csv.reader(open(os.path.join(TAXI, "span-201611", "data.csv"))))[0])
    assert (missing, new) == (["trip_miles"], ["trip_distance_miles"])
    [hint] = columns.rename_hints(root, span, "csv", missing, new, gate_policy.GatePolicy())
    assert (hint.new, hint.missing, hint.kind, hint.measure, hint.history_span) == (
        "trip_distance_miles", "trip_miles", "number", "ks", 201611)
    assert hint.value <= hint.limit
    text = columns.stop_message("data.csv", missing, new, gate_policy.GatePolicy(), [hint])
    assert "missing column(s) trip_miles" in text and "'trip_distance_miles' looks like 'trip_miles' renamed" in text


def test_a_renamed_text_column_is_matched_by_its_category_shares(tmp_path):
    root, span = _months(tmp_path, rename={"payment_type": "payment_method"})
    [hint] = columns.rename_hints(root, span, "csv", ["payment_type"], ["payment_method"], gate_policy.GatePolicy())
    assert (hint.missing, hint.kind, hint.measure) == ("payment_type", "text", "linf")


def test_a_different_column_in_place_of_a_missing_one_gets_no_hint(tmp_path):
    # trip_miles gone, a new column of other numbers (seconds, not miles) and one of text.
    root, span = _months(tmp_path, rename={"trip_miles": "wait_seconds"})
    path = os.path.join(spans.span_dir(root, span), "data.csv")
    rows = list(csv.reader(open(path, newline="")))
    i = rows[0].index("wait_seconds")
    for n, row in enumerate(rows[1:]):
        row[i] = str(60 + 37 * n % 900)
    csv.writer(open(path, "w", newline=""), lineterminator="\n").writerows(rows)
    assert columns.rename_hints(root, span, "csv", ["trip_miles"], ["wait_seconds"], gate_policy.GatePolicy()) == []
    text = columns.stop_message(path, ["trip_miles"], ["wait_seconds"], gate_policy.GatePolicy(), [])
    assert text.endswith("missing column(s) trip_miles; column(s) not in the schema wait_seconds")


def test_a_new_column_stops_under_stop_and_goes_on_under_report(tmp_path):
    stop, report = gate_policy.GatePolicy(), gate_policy.from_dict({"columns": {"new": "report"}})
    text = columns.stop_message("data.csv", [], ["surge"], stop, [])
    assert "column(s) not in the schema surge" in text and "columns.new: report" in text
    assert columns.stop_message("data.csv", [], ["surge"], report, []) is None
    # A missing column stops whatever the policy says.
    assert "missing column(s) fare" in columns.stop_message("data.csv", ["fare"], [], report, [])


def test_the_run_checks_apply_the_policy_to_a_span_folder(tmp_path):
    from runner import preflight

    schema = os.path.join(REPO, "schemas", "taxi", "schema.pbtxt")
    root, span = _months(tmp_path, add=("surge_multiplier", lambda i: f"{1 + i % 3}"))
    folder = spans.span_dir(root, span)
    with pytest.raises(preflight.InputError, match=r"column\(s\) not in the schema surge_multiplier\. The gate policy"):
        preflight.check_span_files(folder, schema)
    report = gate_policy.from_dict({"columns": {"new": "report"}})
    assert preflight.check_span_files(folder, schema, "csv", report) == ["surge_multiplier"]
    assert preflight.check_span_files(spans.span_dir(root, 201611), schema, "csv", report) == []
    renamed_root, renamed = _months(tmp_path / "renamed", rename={"fare": "fare_usd"})
    with pytest.raises(preflight.InputError, match=r"'fare_usd' looks like 'fare' renamed: .* in span 201611"):
        preflight.check_span_files(spans.span_dir(renamed_root, renamed), schema, "csv", report)


def test_a_month_that_does_not_read_is_nobodys_history(tmp_path):
    # Between the last good month and the renamed one, a refused month (not UTF-8) and one
    # delimited by ';': both are skipped, the hint still names the good month.
    root, _ = _months(tmp_path, rename={"trip_miles": "trip_distance"})
    span = 201703
    os.rename(spans.span_dir(root, 201612), spans.span_dir(root, span))
    for bad, data in ((201701, b"trip_miles,fare\n\xff\xfe,1.0\n"), (201702, b"trip_miles;fare\n1.0;2.0\n")):
        os.makedirs(spans.span_dir(root, bad))
        with open(os.path.join(spans.span_dir(root, bad), "data.csv"), "wb") as f:
            f.write(data)
    [hint] = columns.rename_hints(root, span, "csv", ["trip_miles"], ["trip_distance"], gate_policy.GatePolicy())
    assert hint.history_span == 201611
