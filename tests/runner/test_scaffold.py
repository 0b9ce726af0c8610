"""`retrain new` finds a span's event time and the fields derived from it."""

import numpy as np
import pandas as pd

from runner import scaffold
from tests.conftest import TAXI_DATA


def test_the_taxi_timestamp_and_its_derived_fields_are_found():
    spans = [201610, 201611, 201612]
    frame, row_spans = scaffold._read_frame(TAXI_DATA, spans, "csv")
    found = scaffold.propose_span_consistency(frame, row_spans, "tips")
    assert found == {"event_time": {"feature": "trip_start_timestamp", "unit": "s", "timezone": "UTC"},
                     "tolerance_hours": 1,
                     "derived": {"trip_start_month": "month", "trip_start_hour": "hour", "trip_start_day": "weekday_sun1"}}
    # The event time and the month are functions of the span: drift does not watch them.
    assert set(scaffold.drift_opt_outs(found)) == {"trip_start_timestamp", "trip_start_month"}


def _frame(times: pd.DatetimeIndex, **columns):
    return pd.DataFrame({**columns}), pd.Series(times.year * 100 + times.month, dtype="int64")


def test_milliseconds_and_iso_text_are_found_with_their_unit():
    rng = np.random.default_rng(1)
    times = pd.to_datetime("2024-01-01", utc=True) + pd.to_timedelta(rng.integers(0, 90 * 86400, 500), unit="s")
    ms = (times.view("int64") // 1_000_000).astype(str)
    frame, row_spans = _frame(times, created=ms, dow=(times.dayofweek + 1).astype(str), y=rng.random(500).astype(str))
    found = scaffold.propose_span_consistency(frame, row_spans, "y")
    assert found["event_time"] == {"feature": "created", "unit": "ms", "timezone": "UTC"}
    assert found["derived"] == {"dow": "weekday_iso"}
    frame, row_spans = _frame(times, at=times.strftime("%Y-%m-%dT%H:%M:%SZ"), y=rng.random(500).astype(str))
    assert scaffold.propose_span_consistency(frame, row_spans, "y")["event_time"]["unit"] == "iso8601"


def test_no_event_time_is_proposed_where_none_fits_its_span():
    rng = np.random.default_rng(2)
    times = pd.to_datetime("2024-01-01", utc=True) + pd.to_timedelta(rng.integers(0, 90 * 86400, 300), unit="s")
    # Times of another month than the row's span (a signup date): not the event time.
    frame, row_spans = _frame(times, signup=(times.view("int64") // 10**9 - 200 * 86400).astype(str),
                              x=rng.random(300).astype(str))
    assert scaffold.propose_span_consistency(frame, row_spans, "x") is None
    assert scaffold.drift_opt_outs(None) == {}
