"""The data gate's decision with the shipped taxi policy on real months and on corrupted ones.

Statistics are TFDV's, computed with the pipeline's options from the embedded CSVs (the
same type inference as CsvExampleGen); each corrupted span is compared with the real
month before it, as the gate compares a new span with the last span that passed.
"""

import dataclasses
import os

import pytest
import tensorflow_data_validation as tfdv

from components.data_gate import measures
from components.data_gate.component import evaluate_gate
from core import spans
from pipelines import config as config_lib
from runner import gate_offline as offline
from runner import preflight
from tests import corpus
from tests.conftest import TAXI_CONFIG, TAXI_DATA, TAXI_SCHEMA

# A large month (400 rows); corruptions are compared with the month before it.
SOURCE, BASELINE = 201505, 201504


@pytest.fixture(scope="module")
def config():
    return config_lib.load(TAXI_CONFIG)


@pytest.fixture(scope="module")
def policy(config):
    return config_lib.load_gate_policy(config)


@pytest.fixture(scope="module")
def schema(config):
    return preflight.load_schema(config.schema_path)


def _stats(folder: str):
    return tfdv.generate_statistics_from_csv(os.path.join(folder, "*.csv"), stats_options=measures.stats_options())


class _MonthStats(dict):
    """TFDV statistics of an embedded month, computed the first time a test asks for it
    (a Beam pipeline each: computing all 25 up front cost minutes for the three used)."""

    def __missing__(self, span: int):
        self[span] = _stats(spans.span_dir(TAXI_DATA, span))
        return self[span]


@pytest.fixture(scope="module")
def month_stats():
    return _MonthStats()


@pytest.fixture(scope="module")
def judge(config, policy):
    return offline.Judge.for_config(config, policy)


def test_good_months_are_not_stopped(judge, policy):
    """24 consecutive real months (2015-01..2016-12), each against the month before, with
    every check the gate runs: statistics, schema, and the row-level checks over every row."""
    months = spans.list_spans(TAXI_DATA)[-25:]
    assert len(months) == 25
    for base, span in zip(months, months[1:]):
        result = judge.judge(spans.span_dir(TAXI_DATA, span), span, base)
        assert result["passed"], (span, [a["reasons"][0]["description"] for a in result["anomalies"]])
        watched = {d["feature"] for d in result["drift"]}
        assert "trip_miles" in watched and "company" in watched and "tips" in watched
        assert not watched & set(policy.opt_out)
        rows = result["row_checks"]
        # Opting out of drift is not opting out of consistency: the timestamp and the month are checked.
        assert {c["feature"] for c in rows["consistency"]} == {
            "trip_start_timestamp", "trip_start_hour", "trip_start_day", "trip_start_month"}
        assert {"fare", "trip_start_hour", "payment_type", "trip_miles"} <= {c["feature"] for c in rows["domains"]}
        assert [c["check"] for c in rows["label"]["checks"]] == ["label_missing", "label_classes"]


# The classes the statistics catch (the gate's first rounds), on a large month as before; the
# row-level classes on a large (424 rows) and a small (71 rows) month.
STATS_CLASSES = ("scale", "missing", "category", "volume")
ROW_CLASSES = ("domain", "time", "derived", "label")
CASES = [pytest.param(c, 201505, id=f"{c.name}-large") for c in corpus.CORRUPTIONS
         if c.kind in STATS_CLASSES and c.name != "trip_miles_in_km"]
CASES += [pytest.param(c, span, id=f"{c.name}-{size}") for c in corpus.CORRUPTIONS if c.kind in ROW_CLASSES
          for span, size in ((201505, "large"), (201605, "small"))]


@pytest.mark.parametrize("corruption, span", CASES)
def test_corrupted_month_is_stopped_naming_feature_and_check(corruption, span, tmp_path, judge):
    corpus.write_corrupted(TAXI_DATA, span, corruption, str(tmp_path), span)
    result = judge.judge(spans.span_dir(str(tmp_path), span), span, spans.shift_span(span, -1))
    assert not result["passed"]
    blocking = [a for a in result["anomalies"] if a["feature"] in corruption.features
                and (corruption.check is None or a["kind"] == corruption.check)]
    assert blocking, (corruption.features, corruption.check, [(a["feature"], a["kind"]) for a in result["anomalies"]])
    measured = [a for a in blocking if a["kind"] != "schema"]
    if not measured:  # ExampleValidator's own anomaly (a type the schema does not have) named it
        return
    description = measured[0]["reasons"][0]["description"]
    # The message names the feature and the measured value against its limit.
    named = corruption.feature if corruption.feature != "<rows>" else ""
    assert any(description.startswith(f) or description.startswith(f"label {f}") for f in (named, *corruption.also))
    assert any(ch.isdigit() for ch in description)
    assert "limit" in description or "outside" in description or "allowed" in description or "constant" in description


def test_an_out_of_domain_stop_names_the_values_and_their_count(tmp_path, judge):
    corpus.write_corrupted(TAXI_DATA, 201605, corpus.BY_NAME["community_area_99"], str(tmp_path), 201605)
    result = judge.judge(spans.span_dir(str(tmp_path), 201605), 201605, 201604)
    [check] = [c for c in result["row_checks"]["domains"] if c["feature"] == "pickup_community_area"]
    assert check["failed"] and check["outside"] == 2 and check["examples"] == [[99, 2]]
    assert "2 of 71 values" in check["description"] and "99 (x2)" in check["description"]


def test_a_domain_opted_out_with_a_reason_is_not_checked_and_says_why(tmp_path, config, policy):
    reason = "area codes are being renumbered this quarter"
    relaxed = offline.Judge.for_config(config, dataclasses.replace(
        policy, domain_opt_out={"pickup_community_area": reason}))
    corpus.write_corrupted(TAXI_DATA, 201605, corpus.BY_NAME["community_area_99"], str(tmp_path), 201605)
    result = relaxed.judge(spans.span_dir(str(tmp_path), 201605), 201605, 201604)
    assert "pickup_community_area" not in result["blocking_features"]
    assert result["domain_opt_out"] == {"pickup_community_area": reason}
    assert "pickup_community_area" not in {c["feature"] for c in result["row_checks"]["domains"]}


def test_unit_change_is_caught_on_a_large_month_and_its_value_is_the_factor(tmp_path, month_stats, schema, policy):
    corpus.write_corrupted(TAXI_DATA, SOURCE, corpus.BY_NAME["trip_miles_in_km"], str(tmp_path), SOURCE)
    baseline = month_stats[BASELINE]
    result = evaluate_gate(_stats(spans.span_dir(str(tmp_path), SOURCE)), schema, {}, baseline, policy, BASELINE)
    scale = next(d for d in result["drift"] if d["feature"] == "trip_miles" and d["measure"] == "scale")
    assert scale["drifted"] and scale["value"] > 0.3  # log(1.609) = 0.48, less the months' own difference


BYTES = [c for c in corpus.CORRUPTIONS if c.kind == "bytes"]


@pytest.mark.parametrize("corruption", BYTES, ids=[c.name for c in BYTES])
def test_bytes_that_are_not_text_anywhere_are_bad_input_naming_file_and_position(corruption, tmp_path):
    path = corpus.write_corrupted(TAXI_DATA, 201612, corruption, str(tmp_path), 201612)
    with pytest.raises(preflight.InputError) as e:
        preflight.check_span_files(os.path.dirname(path), TAXI_SCHEMA)
    message = str(e.value)
    assert message.startswith(path) and "line" in message and "byte" in message, message
    assert corruption.feature in message, message


@pytest.mark.parametrize("name", ["truncated_last_line", "ragged_row", "non_utf8_bytes"])
def test_structural_errors_are_bad_input_with_file_and_row(name, tmp_path):
    path = corpus.write_corrupted(TAXI_DATA, 201612, corpus.BY_NAME[name], str(tmp_path), 201612)
    with pytest.raises(preflight.InputError) as e:
        preflight.check_csv_structure(path)
    message = str(e.value)
    assert message.startswith(path)
    assert {"truncated_last_line": "row 72 (line 73)", "ragged_row": "more fields than the header",
            "non_utf8_bytes": "not valid UTF-8"}[name] in message
    assert "line" in message


def test_first_span_has_no_baseline_but_completeness_still_applies(month_stats, schema, policy, tmp_path):
    corpus.write_corrupted(TAXI_DATA, SOURCE, corpus.BY_NAME["fare_mostly_empty"], str(tmp_path), SOURCE)
    result = evaluate_gate(_stats(spans.span_dir(str(tmp_path), SOURCE)), schema, {}, None, policy)
    assert not result["drift_checked"] and result["drift"] == [] and result["volume"] is None
    assert result["blocking_features"] == ["fare"]
    [check] = [c for c in result["completeness"] if c["feature"] == "fare" and c["failed"]]
    assert check["measure"] == "missing_share" and check["value"] == pytest.approx(0.8, abs=0.08)


def test_a_drift_comparator_in_the_schema_overrides_the_calibrated_limit(month_stats, schema, policy):
    strict = type(schema)()
    strict.CopyFrom(schema)
    fare = next(f for f in strict.feature if f.name == "fare")
    fare.drift_comparator.jensen_shannon_divergence.threshold = 1e-6
    result = evaluate_gate(month_stats[201612], strict, {}, month_stats[201611], policy, 201611)
    assert result["blocking_features"] == ["fare"]
    [check] = [d for d in result["drift"] if d["drifted"]]
    assert (check["measure"], check["threshold"], check["limit_source"]) == ("jsd", 1e-6, "schema")


def test_windows_line_endings_read_and_a_cut_last_line_is_still_called_truncated(tmp_path):
    data = corpus.to_csv(*corpus.read_rows(TAXI_DATA, 201612)).replace(b"\n", b"\r\n")
    path = tmp_path / "crlf.csv"
    path.write_bytes(data)
    assert preflight.check_csv_structure(str(path)) == 72
    path.write_bytes(data[:-30])
    with pytest.raises(preflight.InputError, match=r"row 72 \(line 73\): .* the last line is cut short"):
        preflight.check_csv_structure(str(path))


@pytest.mark.parametrize(("mutate", "feature", "kind"), [
    (lambda r: {**r, "payment_type": "Bitcoin"}, "payment_type", "schema"),  # a value outside the domain
    (lambda r: {**r, "trip_miles": "n/a"}, "trip_miles", "schema"),  # wrong type
    (lambda r: {**r, "fare": str(float(r["fare"] or 0) * 40 + 500)}, "fare", "drift"),  # shifted distribution
], ids=["unseen-category", "wrong-type", "shifted-distribution"])
def test_schema_anomalies_and_shifts_stop_the_month(mutate, feature, kind, tmp_path, month_stats, schema, policy):
    """With ExampleValidator's anomalies as the pipeline computes them (tfdv.validate_statistics)."""
    header, rows = corpus.read_rows(TAXI_DATA, SOURCE)
    spans.write_span(str(tmp_path), SOURCE, header, [[mutate(dict(r))[h] for h in header] for r in rows])
    stats = _stats(spans.span_dir(str(tmp_path), SOURCE))
    anomalies = tfdv.validate_statistics(stats, schema)
    baseline = month_stats[BASELINE]
    result = evaluate_gate(stats, schema, {"train": anomalies}, baseline, policy, BASELINE)
    assert not result["passed"] and feature in result["blocking_features"]
    assert any(a["feature"] == feature and a["kind"] == kind for a in result["anomalies"]), result["anomalies"]
