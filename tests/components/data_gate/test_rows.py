"""The gate's row-level checks on synthetic data with known answers: the share test, span
consistency (units, time zones, derived kinds), domains learned from history, the label."""

import collections

import numpy as np
import pandas as pd
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from components.data_gate import consistency, domains, label, policy, rows
from core.settings import SettingsError

# --- the share test -------------------------------------------------------------------------


def test_share_test_is_a_one_sided_binomial_test():
    # 1 value in 70 where one in 15,000 is allowed: P(X >= 1) = 1 - (1 - 1/15000)^70 = 0.0047.
    failed, p = policy.share_exceeded(1, 70, 1 / 15000, 0.01)
    assert failed and p == pytest.approx(1 - (1 - 1 / 15000) ** 70)
    # The same value in a month of 400: P = 0.026, not significant at 1%.
    assert policy.share_exceeded(1, 400, 1 / 15000, 0.01)[0] is False
    assert policy.share_exceeded(0, 400, 0.0, 0.01) == (False, 1.0)
    # Below the allowed share never stops, however significant a deviation would be.
    assert policy.share_exceeded(3, 1000, 0.01, 0.01)[0] is False


def test_allowed_share_lets_every_good_span_pass_with_the_margin():
    counts = [(0, 300), (1, 71), (4, 400), (0, 350)]
    allowed, worst = policy.allowed_share(counts, margin=1.5, alpha=0.01)
    assert worst in (1, 2) and allowed > 0
    for count, n in counts:
        assert not policy.share_exceeded(count, n, allowed, 0.01)[0]
    # A rule no span broke allows three values in the whole history (the rule of three) ...
    assert policy.allowed_share([(0, 500), (0, 500)], 1.5, 0.01) == (0.003, 0)
    # ... or one, for values far beyond a feature's range.
    assert policy.allowed_share([(0, 500), (0, 500)], 1.5, 0.01, floor_values=1.0) == (0.001, 0)


# --- span consistency -----------------------------------------------------------------------


def _times(values, unit="s", tz="UTC"):
    return consistency.event_times(np.asarray(values), consistency.EventTime("t", unit, tz))


@pytest.mark.parametrize("values, unit", [
    ([1481000000], "s"), ([1481000000000], "ms"), ([1481000000000000], "us"), ([1481000000 * 10**9], "ns"),
    ([b"2016-12-06T04:53:20Z"], "iso8601"), ([b"2016-12-05 22:53:20"], "iso8601"),
])
def test_event_times_in_every_unit_read_as_the_same_instant(values, unit):
    tz = "America/Chicago" if values == [b"2016-12-05 22:53:20"] else "UTC"  # naive text is local time
    [t] = _times(values, unit, tz)
    assert t.tz_convert("UTC") == pd.Timestamp("2016-12-06T04:53:20Z")


def test_values_that_are_not_times_are_nat():
    times = _times([1.4e12 * 1e6, float("nan"), 1481000000], "s")  # beyond year 2262, NaN, a time
    assert list(times.isna()) == [True, True, False]
    assert _times([b"not a date"], "iso8601").isna().all()


def test_derived_kinds_from_one_instant():
    times = _times([1481000000], "s", "America/Chicago")  # Mon 2016-12-05 22:53:20 in Chicago
    expected = {"year": 2016, "quarter": 4, "month": 12, "month0": 11, "day": 5, "dayofyear": 340, "hour": 22,
                "minute": 53, "weekday_iso": 1, "weekday_sun1": 2, "weekday_mon0": 0, "weekday_sun0": 1,
                "date": 20161205, "yearmonth": 201612}
    assert set(expected) == set(consistency.DERIVED_KINDS)
    assert {k: int(consistency.derive(times, k)[0]) for k in expected} == expected


def test_a_span_period_is_its_month_in_the_time_zone():
    start, end = consistency.period(201603, "America/Chicago")
    assert (start.isoformat(), end.isoformat()) == ("2016-03-01T00:00:00-06:00", "2016-04-01T00:00:00-05:00")


def _first(values, present=None):
    values = np.asarray(values)
    return values, np.ones(len(values), bool) if present is None else np.asarray(present)


def test_tally_counts_times_outside_the_span_and_derived_fields_that_disagree():
    settings = consistency.SpanConsistency.from_dict(
        {"event_time": {"feature": "t"}, "tolerance_hours": 1, "derived": {"h": "hour"}}, "span_consistency")
    tally = consistency.Tally(settings, 201612)
    inside = int(pd.Timestamp("2016-12-10T05:00Z").timestamp())
    late = int(pd.Timestamp("2017-01-01T00:30Z").timestamp())  # within the hour's tolerance
    outside = int(pd.Timestamp("2017-01-01T02:00Z").timestamp())
    tally.add({"t": _first([inside, late, outside, inside]), "h": _first([5, 0, 2, 7], [1, 1, 1, 0])})
    counted = tally.to_dict()
    assert (counted["event_time"]["checked"], counted["event_time"]["violations"]) == (4, 1)
    assert "2017-01-01T02:00:00+00:00" in counted["event_time"]["examples"][0][0]
    # Rows with an event time outside the span still say what their hour is; a row without one is not checked.
    assert (counted["derived"]["h"]["checked"], counted["derived"]["h"]["violations"]) == (3, 0)
    tally.add({"t": _first([inside]), "h": _first([6])})
    assert tally.to_dict()["derived"]["h"]["violations"] == 1
    [event, hour] = consistency.judge(tally.to_dict(), {}, 0.01)
    assert event["failed"] and hour["failed"] and hour["limit_source"] == "default"
    assert "disagree with the hour, 0-23 of t" in hour["description"] and "6 where the event time says 5" in hour["description"]


@pytest.mark.parametrize("block, message", [
    ({"event_time": {"feature": "t", "unit": "minutes"}}, "span_consistency.event_time.unit: 'minutes' is not one of"),
    ({"event_time": {"feature": "t", "timezone": "Mars/Olympus"}}, "span_consistency.event_time.timezone"),
    ({"event_time": {"feature": "t"}, "derived": {"h": "hours"}}, "span_consistency.derived.h: 'hours' is not one of"),
    ({"derived": {"h": "hour"}}, "span_consistency.derived: needs event_time"),
    ({"event_time": {"feature": "t"}, "tolerance_hours": -1}, "span_consistency.tolerance_hours: must be >= 0"),
    ({"event_time": {"unit": "s"}}, "span_consistency.event_time: missing key(s) feature"),
    ({"event_time": {"feature": "t"}, "tolerance": 1}, "span_consistency: unknown key(s) tolerance"),
])
def test_bad_declarations_name_the_key(block, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        consistency.SpanConsistency.from_dict(block, "span_consistency")


# --- domains --------------------------------------------------------------------------------


def _tally(kind, values):
    t = domains.FeatureTally(kind)
    t.add(np.asarray(values, dtype=object if kind == "bytes" else None))
    return t


def test_value_sets_learn_first_spans_and_leave_one_out_shares():
    history = [(201601, {"c": _tally("bytes", [b"a"] * 50 + [b"b"] * 50)}),
               (201602, {"c": _tally("bytes", [b"a"] * 48 + [b"b"] * 50 + [b"new"] * 2)}),
               (201603, {"c": _tally("bytes", [b"a"] * 50 + [b"b"] * 50)})]
    found, none, evidence = domains.learn(history, ["c"], margin=1.5, skip={}, alpha=0.01)
    entry = found["c"]
    assert entry["values"] == {"a": 201601, "b": 201601, "new": 201602}
    # 201602 held 2 values of 100 no other span had: its count is consistent with shares down to
    # the Clopper-Pearson bound, and the allowed share is 1.5 times that.
    assert entry["observed"]["at"] == 201602 and entry["observed"]["count"] == 2
    from scipy import stats

    # ... and never below three values in the history (300 values here).
    assert entry["allowed_share"] == pytest.approx(max(1.5 * stats.beta.ppf(0.01, 2, 99), 3 / 300), rel=1e-3)
    # Leaving each span out, and each span against the ones before it (how the set grows).
    assert [(r["check"], r["span"], r["count"]) for r in evidence] == [
        ("domain", 201601, 0), ("domain", 201602, 2), ("domain", 201603, 0),
        ("domain_growth", 201602, 2), ("domain_growth", 201603, 0)] and none == {}


def test_codes_get_sets_and_quantities_get_ranges_with_a_far_band():
    hours = [(s, {"h": _tally("int", list(range(24)) * 3), "x": _tally("float", np.linspace(1, 9, 50) * i)})
             for i, s in enumerate((201601, 201602, 201603), 1)]
    found, _, _ = domains.learn(hours, ["h", "x"], margin=1.5, skip={}, alpha=0.01)
    assert set(found["h"]["values"]) == set(range(24))
    x = found["x"]
    assert x["seen"] == {"min": 1.0, "min_at": 201601, "max": 27.0, "max_at": 201603, "margin": 0.5, "far_margin": 5.0}
    assert x["range"] == [0.0, 40.0]  # 1..27 widened by half its width, not below zero (all positive)
    assert x["far"]["range"] == [0.0, 157.0]
    seconds = [(s, {"sec": _tally("int", [60 * k for k in range(1, 40)])}) for s in (201601, 201602)]
    found, _, _ = domains.learn(seconds, ["sec"], margin=1.5, skip={}, alpha=0.01)
    assert "range" in found["sec"]  # 39 values spread over 60..2340: a quantity, not a code


def test_features_without_a_domain_say_why():
    many = [(201601, {"id": _tally("bytes", [str(i).encode() for i in range(500)])})]
    _, none, _ = domains.learn(many, ["id", "t"], 1.5, {"t": "the event time"}, 0.01)
    assert none["t"] == "the event time" and "too many for a value set" in none["id"]


def test_domain_tally_and_judge_name_the_values_outside():
    rng = domains.Domain("fare", "float", allowed_share=0.001, low=0.0, high=1000.0, far_low=0.0, far_high=5000.0,
                         far_allowed_share=1e-5, seen={"min": 0.0, "max": 700.0, "min_at": 1, "max_at": 2,
                                                      "far_margin": 5.0})
    tally = domains.Tally(rng)
    tally.add(np.array([5.0] * 68 + [7250.0, -1.0]))
    check = domains.judge(rng, tally.to_dict(), 0.01)
    assert check["failed"] and check["outside"] == 2 and check["domain"] == "range"
    assert "7250.0 (x1)" in check["description"] and "-1.0 (x1)" in check["description"]
    # One value far beyond anything seen stops a small month even where near outliers are common.
    near = domains.Domain("fare", "float", allowed_share=0.02, low=0.0, high=1000.0, far_low=0.0, far_high=5000.0,
                          far_allowed_share=1e-5)
    tally = domains.Tally(near)
    tally.add(np.array([5.0] * 69 + [7250.0]))
    check = domains.judge(near, tally.to_dict(), 0.01)
    assert check["failed"] and check["domain"] == "far range" and "far outside its range" in check["description"]
    codes = domains.Domain("area", "int", allowed_share=0.001, values=frozenset(range(1, 78)))
    tally = domains.Tally(codes)
    tally.add(np.array([3] * 400 + [99, 99, 0]))
    assert tally.to_dict()["examples"] == [[99, 2], [0, 1]] and domains.judge(codes, tally.to_dict(), 0.01)["failed"]


def test_a_policy_domain_entry_is_validated():
    with pytest.raises(policy.PolicyError, match=r"domains.fare: expected either values or range"):
        policy.from_dict({"domains": {"fare": {"kind": "float", "allowed_share": 0.1}}}, "gate.yaml")
    with pytest.raises(policy.PolicyError, match=r"domains.fare.far.range: must hold the range"):
        policy.from_dict({"domains": {"fare": {"kind": "float", "range": [0, 10], "allowed_share": 0.1,
                                               "far": {"range": [1, 5], "allowed_share": 0}}}}, "gate.yaml")
    with pytest.raises(policy.PolicyError, match=r"domain_opt_out.fare: a feature opts out only with a reason"):
        policy.from_dict({"domain_opt_out": {"fare": " "}}, "gate.yaml")
    loaded = policy.from_dict({"domains": {"h": {"kind": "int", "values": {"3": 201601}, "allowed_share": 0}}})
    # JSON (the component's parameter) turns integer keys into text; the policy turns them back.
    assert loaded.domains["h"]["values"] == {3: 201601}
    again = policy.from_dict(loaded.to_json_dict())
    assert again.domains == loaded.domains


# --- the label ------------------------------------------------------------------------------


def _schema(*features):
    schema = schema_pb2.Schema()
    for name, kind in features:
        schema.feature.add(name=name, type=kind)
    return schema


def _examples(rows_):
    out = []
    for row in rows_:
        feature = {}
        for k, v in row.items():
            if v is None:
                continue
            if isinstance(v, float):
                feature[k] = tf.train.Feature(float_list=tf.train.FloatList(value=[v]))
            else:
                feature[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
        out.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return out


def big_tip(inputs):
    """A label of two sources, like taxi's: tips > 0.2 x fare."""
    fare = tf.sparse.to_dense(inputs["fare"])[:, 0] if isinstance(inputs["fare"], tf.SparseTensor) else inputs["fare"]
    tips = tf.sparse.to_dense(inputs["tips"], default_value=0.0)
    return tf.cast(tips[:, 0] > 0.2 * fare, tf.int64)


SCHEMA = _schema(("fare", schema_pb2.FLOAT), ("tips", schema_pb2.FLOAT), ("other", schema_pb2.INT))


def test_the_label_is_computed_by_the_pipelines_function_and_its_sources_found():
    tally = label.Tally(f"{__name__}.big_tip", SCHEMA, label.CLASSES)
    records = _examples([{"fare": 10.0, "tips": 3.0, "other": 1}, {"fare": 10.0, "tips": 1.0, "other": 2},
                         {"fare": 10.0, "tips": None, "other": 3}])
    scan = rows.SpanScan(SCHEMA, label=(f"{__name__}.big_tip", label.CLASSES))
    scan.add(records)
    facts = scan.label.facts()
    assert facts["sources"] == ["fare", "tips"] and facts["classes"] == {"0": 1, "1": 1}
    assert (facts["rows"], facts["missing"]) == (3, 1)  # the row without tips has no label, only a fill value
    assert tally.sources is None  # (its own tally, unused)


def test_label_checks_constant_classes_and_missing_against_the_reference():
    reference = [{"kind": "classes", "rows": 400, "missing": 0, "labelled": 400, "classes": {"0": 300, "1": 100},
                  "span": 201601}]
    constant = {"kind": "classes", "rows": 70, "missing": 0, "labelled": 70, "classes": {"0": 70}, "sources": ["t"]}
    checks = {c["check"]: c for c in label.judge(constant, reference, None, 0.01, "y", 201602)}
    assert checks["label_constant"]["failed"]  # 0.75^70: one in a billion
    assert checks["label_classes"]["limit_source"] == "default"
    flipped = {**constant, "classes": {"0": 10, "1": 60}}
    checks = {c["check"]: c for c in label.judge(flipped, reference, None, 0.01, "y", 201602)}
    assert checks["label_classes"]["failed"] and checks["label_classes"]["class"] in ("0", "1")
    assert "is 14.3% of 70 rows vs 75.0% of 400 in the reference (spans 201601)" in checks["label_classes"]["description"]
    fine = {**constant, "classes": {"0": 52, "1": 18}}
    assert not any(c["failed"] for c in label.judge(fine, reference, None, 0.01, "y", 201602))
    # A rare class may well be absent from a small month: constant is then not a stop by itself.
    rare = [{**reference[0], "classes": {"0": 398, "1": 2}}]
    checks = {c["check"]: c for c in label.judge(constant, rare, None, 0.01, "y", 201602)}
    assert not checks["label_constant"]["failed"]
    missing = {**fine, "missing": 9, "labelled": 61}
    checks = {c["check"]: c for c in label.judge(missing, reference, {"allowed_missing_share": 0.01, "kind": "classes",
                                                                       "k": {"classes": 5.0}}, 0.01, "y", 201602)}
    assert checks["label_missing"]["failed"] and "9 of 70 rows" in checks["label_missing"]["description"]


def test_a_regression_labels_distribution_is_checked_against_the_reference():
    rng = np.random.default_rng(0)

    def facts(values):
        values = np.asarray(values, float)
        return {"kind": "numeric", "rows": len(values), "missing": 0, "labelled": len(values), "count": len(values),
                "zeros": int((values == 0).sum()), "distinct": len(np.unique(values)),
                "quantiles": list(np.quantile(values, np.linspace(0, 1, label.QUANTILES))), "sources": ["y"]}

    reference = [dict(facts(rng.normal(150, 70, 400).clip(25)), span=s) for s in (201601, 201602, 201603)]
    assert not any(c["failed"] for c in label.judge(facts(rng.normal(150, 70, 70).clip(25)), reference, None, 0.01,
                                                    "y", 201604))
    doubled = {c["check"]: c for c in label.judge(facts(2 * rng.normal(150, 70, 70).clip(25)), reference, None, 0.01,
                                                  "y", 201604)}
    assert doubled["label_scale"]["failed"] or doubled["label_ks"]["failed"]
    constant = {c["check"]: c for c in label.judge(facts([100.0] * 70), reference, None, 0.01, "y", 201604)}
    assert constant["label_constant"]["failed"]


def test_mixture_quantiles_of_equal_parts_are_the_pooled_quantiles():
    a, b = np.linspace(0, 1, 1001), np.linspace(1, 3, 1001)
    parts = [{"count": 1001, "quantiles": list(np.quantile(x, np.linspace(0, 1, label.QUANTILES)))} for x in (a, b)]
    pooled = label.mixture_quantiles(parts)
    expected = np.quantile(np.concatenate([a, b]), np.linspace(0, 1, label.QUANTILES))
    assert np.allclose(pooled, expected, atol=0.03)


def test_a_label_function_that_cannot_be_imported_or_computed_is_named():
    with pytest.raises(label.LabelError, match=r"label_fn 'no.such.fn': cannot import it"):
        label.load_fn("no.such.fn")
    schema = _schema(("fare", schema_pb2.INT), ("tips", schema_pb2.FLOAT))
    tally = label.Tally(f"{__name__}.big_tip", schema, label.CLASSES)
    tally.add(_examples([{"fare": 10.0, "tips": 3.0}]))  # fare holds floats
    [check] = label.judge(tally.facts(), [], None, 0.01, "y", 201601)
    assert check["check"] == "label_uncomputable" and check["failed"] and "'fare'" in check["description"]


def test_scan_counts_every_row_of_every_batch():
    records = _examples([{"fare": float(i), "tips": 1.0, "other": i % 5} for i in range(20_000)])
    scan = rows.SpanScan(SCHEMA, learn=True)
    for start in range(0, len(records), rows.BATCH):
        scan.add(records[start:start + rows.BATCH])
    assert scan.rows == 20_000
    other = scan.learned["other"]
    assert other.count == 20_000 and other.counts == collections.Counter({k: 4000 for k in range(5)})
    assert (scan.learned["fare"].minimum, scan.learned["fare"].maximum) == (0.0, 19999.0)
