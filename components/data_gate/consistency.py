"""Span consistency: a span's event times lie in its period, and the fields derived from them agree.

A pipeline declares it in its config (`span_consistency:`, validated at load):

    span_consistency:
      event_time: {feature: trip_start_timestamp, unit: s, timezone: UTC}
      tolerance_hours: 1
      derived: {trip_start_hour: hour, trip_start_day: weekday_sun1, trip_start_month: month}

Partitioned data has a stronger check here than drift: the partition (a monthly span) says
which times are legal, and a derived field can be recomputed from its source. The gate
counts, over every row of the new span, the event times outside the span's month (widened
by the tolerance, in the declared time zone; a value that is not a time counts too) and,
per derived field, the rows whose value differs from the one recomputed from the event
time; each share is judged against the share calibration saw in good months
(`policy.share_exceeded`). TF-free: numpy and pandas.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import zoneinfo
from collections.abc import Mapping

import numpy as np

from core.settings import Settings, SettingsError

# Numeric event times: how many of the unit make a second.
NUMERIC_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
# Text event times: ISO 8601 (a value without an offset is read in the declared time
# zone), or any strptime format (one with a % in it).
ISO = "iso8601"
# What a derived field can be, computed from the event time in the declared time zone.
DERIVED_KINDS = {
    "year": "the year",
    "quarter": "the quarter, 1-4",
    "month": "the month, 1-12",
    "month0": "the month, 0-11",
    "day": "the day of the month, 1-31",
    "dayofyear": "the day of the year, 1-366",
    "hour": "the hour, 0-23",
    "minute": "the minute, 0-59",
    "weekday_iso": "the day of the week, Monday 1 .. Sunday 7 (ISO 8601)",
    "weekday_sun1": "the day of the week, Sunday 1 .. Saturday 7 (BigQuery's DAYOFWEEK)",
    "weekday_mon0": "the day of the week, Monday 0 .. Sunday 6 (Python's weekday())",
    "weekday_sun0": "the day of the week, Sunday 0 .. Saturday 6 (JavaScript's getDay())",
    "date": "the date as YYYYMMDD",
    "yearmonth": "the month as YYYYMM",
}
# Seconds that numpy's datetime64[ns] can hold either side of 1970 (years 1678-2261).
_NS_LIMIT_SECONDS = 9.2e9
_OFFSET_RE = re.compile(r"(?:Z|[+-]\d\d:?\d\d)$")
# Offending values kept per check for the report (the most frequent).
EXAMPLES = 5


@dataclasses.dataclass(frozen=True)
class EventTime(Settings):
    """Which feature holds each row's event time, in which unit and time zone."""

    # The feature holding the event time.
    feature: str
    # s, ms, us, ns (numbers since the epoch), iso8601 or a strptime format such as '%Y-%m-%d %H:%M:%S'.
    unit: str = "s"
    # The IANA time zone of times without an offset, and of the derived fields.
    timezone: str = "UTC"

    def check(self) -> None:
        if self.unit not in NUMERIC_UNITS and self.unit != ISO and "%" not in self.unit:
            raise SettingsError(f"unit: {self.unit!r} is not one of {', '.join([*NUMERIC_UNITS, ISO])} or a"
                                " strptime format (e.g. '%Y-%m-%d %H:%M:%S')")
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise SettingsError(f"timezone: {self.timezone!r} is not a time zone name (IANA, e.g. UTC,"
                                f" America/Chicago): {e}") from None


@dataclasses.dataclass(frozen=True)
class SpanConsistency(Settings):
    """The `span_consistency:` block of a pipeline config (empty: nothing is checked)."""

    # The feature holding each row's event time (its unit and time zone); none: nothing is checked.
    event_time: EventTime | None = None
    # How far outside the span's month an event time may lie (late or early records).
    tolerance_hours: float = 1.0
    # Feature -> what it is derived from the event time (a key of DERIVED_KINDS).
    derived: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def check(self) -> None:
        if self.tolerance_hours < 0:
            raise SettingsError(f"tolerance_hours: must be >= 0, got {self.tolerance_hours}")
        for feature, kind in self.derived.items():
            if kind not in DERIVED_KINDS:
                raise SettingsError(f"derived.{feature}: {kind!r} is not one of {', '.join(DERIVED_KINDS)}")
        if self.derived and self.event_time is None:
            raise SettingsError("derived: needs event_time (the fields are recomputed from it)")
        if self.event_time and self.event_time.feature in self.derived:
            raise SettingsError(f"derived.{self.event_time.feature}: the event time cannot derive from itself")

    @property
    def enabled(self) -> bool:
        return self.event_time is not None

    @property
    def features(self) -> list[str]:
        """Every feature the block names."""
        return ([self.event_time.feature] if self.event_time else []) + list(self.derived)


def check_features(settings: SpanConsistency, schema_features: list[str]) -> None:
    """The block must name schema features.

    Raises:
      SettingsError: naming the unknown features.
    """
    unknown = sorted(set(settings.features) - set(schema_features))
    if unknown:
        raise SettingsError(f"feature(s) not in the schema: {', '.join(unknown)}")


def period(span: int, timezone: str):
    """[start, end) of a monthly span (YYYYMM) in the time zone, as pandas Timestamps."""
    import pandas as pd

    start = pd.Timestamp(year=span // 100, month=span % 100, day=1, tz=timezone)
    return start, start + pd.DateOffset(months=1)


def event_times(values: np.ndarray, event: EventTime):
    """The event times of `values` as a tz-aware pandas DatetimeIndex in the declared zone;
    NaT where a value is not a time (unparseable, not finite, or beyond years 1678-2261)."""
    import pandas as pd

    if event.unit in NUMERIC_UNITS:
        seconds = np.asarray(values, np.float64) / NUMERIC_UNITS[event.unit]
        ok = np.isfinite(seconds) & (np.abs(seconds) < _NS_LIMIT_SECONDS)
        ns = np.where(ok, np.round(np.where(ok, seconds, 0.0) * 1e9), 0).astype(np.int64)
        times = pd.to_datetime(ns, utc=True)
        return times.where(ok).tz_convert(event.timezone)
    text = pd.Series([v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in values])
    if event.unit != ISO:
        naive = pd.to_datetime(text, format=event.unit, errors="coerce")
        if getattr(naive.dt, "tz", None) is not None:
            return pd.DatetimeIndex(naive.dt.tz_convert(event.timezone))
        return pd.DatetimeIndex(naive.dt.tz_localize(event.timezone, ambiguous="NaT", nonexistent="NaT"))
    with_offset = text.str.contains(_OFFSET_RE)
    out = pd.Series(pd.NaT, index=text.index, dtype=f"datetime64[ns, {event.timezone}]")
    if with_offset.any():
        out[with_offset] = pd.to_datetime(text[with_offset], utc=True, errors="coerce").dt.tz_convert(event.timezone)
    if (~with_offset).any():
        naive = pd.to_datetime(text[~with_offset], errors="coerce")
        out[~with_offset] = naive.dt.tz_localize(event.timezone, ambiguous="NaT", nonexistent="NaT")
    return pd.DatetimeIndex(out)


def derive(times, kind: str) -> np.ndarray:
    """`kind` (DERIVED_KINDS) of each event time, as float64 (NaN where the time is NaT)."""
    dow = np.asarray(times.dayofweek, np.float64)  # Monday 0
    parts = {
        "year": lambda: times.year, "quarter": lambda: times.quarter, "month": lambda: times.month,
        "month0": lambda: np.asarray(times.month, np.float64) - 1, "day": lambda: times.day,
        "dayofyear": lambda: times.dayofyear, "hour": lambda: times.hour, "minute": lambda: times.minute,
        "weekday_iso": lambda: dow + 1, "weekday_mon0": lambda: dow,
        "weekday_sun1": lambda: (dow + 1) % 7 + 1, "weekday_sun0": lambda: (dow + 1) % 7,
        "date": lambda: np.asarray(times.year, np.float64) * 10000 + np.asarray(times.month) * 100 + times.day,
        "yearmonth": lambda: np.asarray(times.year, np.float64) * 100 + times.month,
    }
    return np.asarray(parts[kind](), np.float64)


def _numbers(values: np.ndarray) -> np.ndarray:
    """A derived field's values as float64 (text is read as a number; NaN where it is not one)."""
    if values.dtype.kind in "iuf":
        return values.astype(np.float64)
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            pass  # not a number: counted as a disagreement
    return out


@dataclasses.dataclass
class CheckCount:
    """One consistency check's tally over a span: rows checked, rows in violation, examples."""

    checked: int = 0
    violations: int = 0
    examples: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def add(self, checked: int, violations: int, shown: list[str]) -> None:
        self.checked += checked
        self.violations += violations
        self.examples.update(shown)

    def to_dict(self) -> dict:
        return {"checked": self.checked, "violations": self.violations,
                "share": self.violations / self.checked if self.checked else 0.0,
                "examples": [[v, n] for v, n in self.examples.most_common(EXAMPLES)]}


# Violations described per batch for the examples (the rest are only counted).
_SHOWN = 200


class Tally:
    """Counts the consistency violations of a span, a batch at a time."""

    def __init__(self, settings: SpanConsistency, span: int):
        import pandas as pd

        self.settings = settings
        start, end = period(span, settings.event_time.timezone)
        tolerance = pd.Timedelta(hours=settings.tolerance_hours)
        self.low, self.high = start - tolerance, end + tolerance
        self.event = CheckCount()
        self.derived = {name: CheckCount() for name in settings.derived}
        self.first = self.last = None

    def add(self, columns: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
        """One batch of rows: feature -> (each row's first value, whether the row has one),
        for the event time and the derived fields (rows.Column.first)."""
        name = self.settings.event_time.feature
        values, present = columns[name]
        rows = np.flatnonzero(present)
        times = event_times(values[rows], self.settings.event_time)
        valid = ~np.asarray(times.isna())
        inside = valid & np.asarray((times >= self.low) & (times < self.high))
        bad = np.flatnonzero(~inside)
        self.event.add(len(rows), len(bad), [_show_time(values[rows[i]], times[i]) for i in bad[:_SHOWN]])
        if valid.any():
            lo, hi = times[valid].min(), times[valid].max()
            self.first = lo if self.first is None or lo < self.first else self.first
            self.last = hi if self.last is None or hi > self.last else self.last
        for derived, kind in self.settings.derived.items():
            got, has = columns[derived]
            both = np.flatnonzero(has[rows] & valid)
            expected = derive(times[both], kind)
            value = got[rows[both]]
            wrong = np.flatnonzero(_numbers(value) != expected)
            self.derived[derived].add(len(both), len(wrong), [
                f"{_show(value[i])} where the event time says {int(expected[i])}" for i in wrong[:_SHOWN]])

    def to_dict(self) -> dict:
        event = self.settings.event_time
        return {
            "event_time": {"feature": event.feature, "unit": event.unit, "timezone": event.timezone,
                           "period": [self.low.isoformat(), self.high.isoformat()],
                           "first": self.first.isoformat() if self.first is not None else None,
                           "last": self.last.isoformat() if self.last is not None else None,
                           **self.event.to_dict()},
            "derived": {name: {"kind": self.settings.derived[name], **count.to_dict()}
                        for name, count in self.derived.items()},
        }


def _show(value) -> str:
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "replace"))
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _show_time(value, time) -> str:
    import pandas as pd

    return f"{_show(value)} ({'not a time' if pd.isna(time) else time.isoformat()})"


def judge(counted: Mapping, allowed: Mapping, alpha: float) -> list[dict]:
    """The consistency checks of a span from its `Tally.to_dict()` and the policy's allowed
    shares (`consistency:` of gate.yaml; a check calibration has not seen allows none)."""
    from components.data_gate import policy as policy_lib

    checks = []
    event = counted["event_time"]
    limit = allowed.get("event_time") or {}
    share = float(limit.get("allowed_share", 0.0))
    failed, p = policy_lib.share_exceeded(event["violations"], event["checked"], share, alpha)
    source = "calibrated" if limit else "default"
    shown = ", ".join(f"{v} (x{n})" for v, n in event["examples"])
    checks.append({
        "feature": event["feature"], "check": "event_time", "checked": event["checked"],
        "violations": event["violations"], "share": round(event["share"], 6), "allowed_share": share, "p_value": p,
        "failed": failed, "limit_source": source, "period": event["period"], "first": event["first"],
        "last": event["last"], "examples": event["examples"],
        "description": f"{event['feature']}: {event['violations']} of {event['checked']} event times"
                       f" ({event['share']:.2%}) outside the span's period {event['period'][0]} .. {event['period'][1]}"
                       f" ({event['timezone']}, with the tolerance) {'exceeds' if failed else 'within'} the allowed"
                       f" share {share:.3%} (p = {p:.2g}, {source})" + (f": {shown}" if shown else ""),
    })
    for name, entry in counted["derived"].items():
        limit = (allowed.get("derived") or {}).get(name) or {}
        share = float(limit.get("allowed_share", 0.0))
        failed, p = policy_lib.share_exceeded(entry["violations"], entry["checked"], share, alpha)
        source = "calibrated" if limit else "default"
        shown = ", ".join(f"{v} (x{n})" for v, n in entry["examples"])
        checks.append({
            "feature": name, "check": "derived", "kind": entry["kind"], "checked": entry["checked"],
            "violations": entry["violations"], "share": round(entry["share"], 6), "allowed_share": share,
            "p_value": p, "failed": failed, "limit_source": source, "examples": entry["examples"],
            "description": f"{name}: {entry['violations']} of {entry['checked']} rows ({entry['share']:.2%}) disagree"
                           f" with {DERIVED_KINDS[entry['kind']]} of {event['feature']} {'exceeds' if failed else 'within'}"
                           f" the allowed share {share:.3%} (p = {p:.2g}, {source})" + (f": {shown}" if shown else ""),
        })
    return checks


def learn(history: list[tuple[int, Mapping]], margin: float, alpha: float) -> tuple[dict, list[dict]]:
    """The `consistency:` section of gate.yaml from each span's `Tally.to_dict()`: each
    check's allowed share comes from the good months' counts (`policy.allowed_share`)."""
    from components.data_gate import policy as policy_lib

    def entry(rows: list[tuple[int, Mapping]]) -> dict:
        share, i = policy_lib.allowed_share([(r["violations"], r["checked"]) for _, r in rows], margin, alpha)
        worst = rows[i][1]
        return {"allowed_share": share,
                "observed": {"max_share": float(f"{worst['share']:.4g}"), "count": worst["violations"],
                             "of": worst["checked"], "at": rows[i][0], "rows": sum(r["checked"] for _, r in rows)}}

    section = {"event_time": entry([(s, c["event_time"]) for s, c in history]),
               "derived": {name: entry([(s, c["derived"][name]) for s, c in history])
                           for name in history[0][1]["derived"]}}
    evidence = [{"span": s, "feature": c["event_time"]["feature"], "check": "event_time",
                 "share": float(f"{c['event_time']['share']:.4g}"), "count": c["event_time"]["violations"],
                 "values": c["event_time"]["checked"]} for s, c in history]
    evidence += [{"span": s, "feature": name, "check": "derived", "share": float(f"{e['share']:.4g}"),
                  "count": e["violations"], "values": e["checked"]}
                 for s, c in history for name, e in c["derived"].items()]
    return section, evidence
