"""The terminal summary names what stopped a span and how a candidate was judged."""

from runner.summary import format_summary


def test_gate_stop_shows_the_feature_the_value_and_the_limit():
    reason = ("trip_miles: scale change (|log| of the median ratio of nonzero quartiles) 7.082 vs span 201612"
              " exceeds the limit 1.259 (k 6.595 / n_eff 27^0.5, calibrated)")
    text = format_summary({
        "run_id": "r1", "pipeline": "taxi", "span": 201704, "outcome": "stopped_by_data_gate",
        "data_gate": {
            "passed": False, "blocking_features": ["trip_miles"], "baseline_span": 201612, "report": "/x/report.json",
            "anomalies": [{"feature": "trip_miles", "kind": "drift", "split": "drift",
                           "reasons": [{"type": "SCALE", "description": reason}]}],
            "drift": [{"feature": "trip_miles", "measure": "scale", "value": 7.082, "threshold": 1.259, "drifted": True},
                      {"feature": "fare", "measure": "ks", "value": 0.1, "threshold": 0.5, "drifted": False}],
            "completeness": [{"feature": "fare"}],
            "volume": {"description": "52 rows vs 58 in span 201612: ratio 0.897 within [0.1311, 1.964]"},
            "opt_out": {"trip_start_month": "a function of the span"},
        },
    })
    assert "STOPPED_BY_DATA_GATE" in text and "STOPPED: trip_miles" in text
    assert reason in text
    assert "closest to its limit: trip_miles scale 7.08 (limit 1.26)" in text
    assert "ratio 0.897 within" in text and "not watched      trip_start_month" in text


def test_evaluation_shows_interval_and_verdict():
    text = format_summary({
        "run_id": "r2", "pipeline": "taxi", "span": 201612, "outcome": "pushed", "blessed": True,
        "evaluation": {
            "candidate": {"auc": 0.80, "example_count": 107}, "baseline": {"auc": 0.83}, "failures": [],
            "significance": {
                "blessed": True, "reasons": [], "example_count": 107,
                "comparisons": [{"metric": "auc", "difference": -0.03, "interval": [-0.07, 0.005], "confidence": 0.95,
                                 "tolerance": -0.02, "verdict": "below tolerance, but not significantly (within noise)"}],
            },
        },
    })
    assert "auc change -0.0300, 95% bounds [-0.0700, +0.0050], tolerated -0.02: below tolerance, but not significantly" in text
    assert "verdict          blessed (107 eval examples)" in text
