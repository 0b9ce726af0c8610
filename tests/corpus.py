"""A corpus of corrupted spans, generated from real embedded months (tests and benchmarks/gates).

Each corruption is one class of bad data the product must stop before Transform. Data
corruptions transform a month's rows (a list of dicts, every value a CSV string) and
name the feature the gate must blame (any of `features`); structural ones rewrite the
file's bytes. Row-level classes (the gates' second round) vary the feature, the share of
rows and, through the months they are applied to, the size:
- domain: codes no month ever had, and 1-5% of absurd magnitudes or sentinels;
- time: event times shifted by hours, in another unit, or from another month;
- derived: time fields computed another way than from the event time (local hour, ISO
  weekday, 0-based month);
- label: the label as label_fn computes it made constant or its positive rate shifted,
  while the raw columns stay close to their months;
- bytes: bytes that are not text at the start, in the middle and at the end of a file.
"""

from __future__ import annotations

import calendar
import csv
import dataclasses
import datetime as dt
import io
import os
import random
from collections.abc import Callable

from core import spans

Rows = list[dict[str, str]]


@dataclasses.dataclass(frozen=True)
class Corruption:
    name: str
    kind: str  # the class: scale, missing, category, volume, structure, domain, time, derived, label, bytes
    feature: str  # what the gate (or the input check) must name
    rows: Callable[[Rows], Rows] | None = None
    raw: Callable[[bytes], bytes] | None = None
    # The check that must name it (a blocking entry's kind: drift, domain, consistency, label).
    check: str | None = None
    # Other names that are as right to blame (a shifted timestamp or the hour it disagrees with).
    also: tuple[str, ...] = ()
    # Start from another month's rows (months before the source span): last year's file again.
    months_before: int = 0

    @property
    def features(self) -> tuple[str, ...]:
        return (self.feature, *self.also)


def _scale(feature: str, factor: float) -> Callable[[Rows], Rows]:
    def apply(rows: Rows) -> Rows:
        return [{**r, feature: (repr(float(r[feature]) * factor) if r[feature] else "")} for r in rows]

    return apply


def _blank(feature: str, share: float, seed: int = 7) -> Callable[[Rows], Rows]:
    def apply(rows: Rows) -> Rows:
        rng = random.Random(seed)
        return [{**r, feature: "" if rng.random() < share else r[feature]} for r in rows]

    return apply


def _collapse(feature: str, value: str, into: str) -> Callable[[Rows], Rows]:
    """Every `value` of a categorical feature recorded as `into`: `value`'s share falls to 0."""

    def apply(rows: Rows) -> Rows:
        return [{**r, feature: into if r[feature] == value else r[feature]} for r in rows]

    return apply


def _keep(share: float, seed: int = 7) -> Callable[[Rows], Rows]:
    def apply(rows: Rows) -> Rows:
        rng = random.Random(seed)
        kept = [r for r in rows if rng.random() < share]
        return kept or rows[:1]

    return apply


def _repeat(times: int) -> Callable[[Rows], Rows]:
    return lambda rows: rows * times


def _truncate(data: bytes) -> bytes:
    """The upload stopped in the middle of the last row."""
    body = data.rstrip(b"\n")
    return body[: body.rfind(b",") - 2]


def _ragged(data: bytes) -> bytes:
    """One row in the middle carries an extra field (an unquoted comma)."""
    lines = data.split(b"\n")
    middle = len(lines) // 2
    lines[middle] = lines[middle] + b",extra"
    return b"\n".join(lines)


def _latin1(data: bytes) -> bytes:
    """A row re-encoded as Latin-1 (a company name with an accent)."""
    lines = data.split(b"\n")
    middle = len(lines) // 2
    lines[middle] = lines[middle][:-1] + "é".encode("latin-1") + lines[middle][-1:]
    return b"\n".join(lines)


def _chosen(rows: Rows, share: float, seed: int) -> set[int]:
    """The indices of `share` of the rows (at least one), seeded."""
    rng = random.Random(seed)
    count = max(1, round(share * len(rows)))
    return set(rng.sample(range(len(rows)), min(count, len(rows))))


def _set_some(feature: str, value: str | Callable[[str], str], share: float, seed: int = 11) -> Callable[[Rows], Rows]:
    """`share` of the rows (at least one) get `value` (or value(old)) for `feature`."""

    def apply(rows: Rows) -> Rows:
        chosen = _chosen(rows, share, seed)
        new = value if callable(value) else (lambda old: value)
        return [{**r, feature: new(r[feature])} if i in chosen else r for i, r in enumerate(rows)]

    return apply


def _times(factor: float) -> Callable[[str], str]:
    return lambda old: repr(float(old) * factor) if old else old


def _timestamp(change: Callable[[int], int]) -> Callable[[Rows], Rows]:
    """Every event time changed, the fields derived from it left as they were."""
    return lambda rows: [{**r, "trip_start_timestamp": str(change(int(r["trip_start_timestamp"])))} for r in rows]


def _derived(feature: str, change: Callable[[int], int], share: float = 1.0) -> Callable[[Rows], Rows]:
    return _set_some(feature, lambda old: str(change(int(old))), share)


def _tips(change: Callable[[float, float], float]) -> Callable[[Rows], Rows]:
    """tips recomputed from (tips, fare): the raw column moves a little, the label a lot."""
    def apply(rows: Rows) -> Rows:
        out = []
        for r in rows:
            tips, fare = float(r["tips"] or 0), float(r["fare"] or 0)
            out.append({**r, "tips": repr(round(change(tips, fare), 2))})
        return out

    return apply


def _shuffled(rows: Rows, feature: str, seed: int = 3) -> Rows:
    values = [r[feature] for r in rows]
    random.Random(seed).shuffle(values)
    return [{**r, feature: v} for r, v in zip(rows, values)]


def _insert_bytes(where: str) -> Callable[[bytes], bytes]:
    """64 seeded bytes that are not text, at the start, in the middle or at the end."""
    junk = bytes(random.Random(5).randrange(128, 256) for _ in range(64))

    def apply(data: bytes) -> bytes:
        at = {"start": 0, "middle": len(data) // 2, "end": len(data)}[where]
        return data[:at] + junk + data[at:]

    return apply


CORRUPTIONS = (
    # A numeric feature with no hand-written comparator recorded in other units.
    Corruption("trip_miles_in_meters", "scale", "trip_miles", rows=_scale("trip_miles", 1609.34)),
    Corruption("trip_miles_in_km", "scale", "trip_miles", rows=_scale("trip_miles", 1.60934)),
    Corruption("trip_seconds_in_minutes", "scale", "trip_seconds", rows=_scale("trip_seconds", 1 / 60)),
    Corruption("fare_in_cents", "scale", "fare", rows=_scale("fare", 100)),
    Corruption("tips_in_cents", "scale", "tips", rows=_scale("tips", 100)),
    Corruption("pickup_latitude_in_radians", "scale", "pickup_latitude", rows=_scale("pickup_latitude", 0.0174533)),
    # Most values of a required column are empty cells.
    Corruption("fare_mostly_empty", "missing", "fare", rows=_blank("fare", 0.8)),
    Corruption("trip_miles_half_empty", "missing", "trip_miles", rows=_blank("trip_miles", 0.5)),
    # An optional column that is usually filled goes mostly empty.
    Corruption("company_mostly_empty", "missing", "company", rows=_blank("company", 0.9)),
    # A category's share collapses.
    Corruption("cash_recorded_as_card", "category", "payment_type",
               rows=_collapse("payment_type", "Cash", "Credit Card")),
    # Volume: a small fraction, or a multiple, of the usual rows.
    Corruption("five_percent_of_rows", "volume", "<rows>", rows=_keep(0.05)),
    Corruption("rows_three_times", "volume", "<rows>", rows=_repeat(3)),
    # Structure: what CsvExampleGen would fail on inside Beam.
    Corruption("truncated_last_line", "structure", "row", raw=_truncate),
    Corruption("ragged_row", "structure", "row", raw=_ragged),
    Corruption("non_utf8_bytes", "structure", "UTF-8", raw=_latin1),
    # Domain: codes outside every value the history had, a few percent of the rows.
    Corruption("hour_code_25", "domain", "trip_start_hour", rows=_set_some("trip_start_hour", "25", 0.03),
               check="domain"),
    Corruption("community_area_99", "domain", "pickup_community_area",
               rows=_set_some("pickup_community_area", "99", 0.03), check="domain"),
    Corruption("weekday_code_0", "domain", "trip_start_day", rows=_set_some("trip_start_day", "0", 0.05),
               check="domain", also=("trip_start_day",)),
    # Domain: 1-5% of absurd magnitudes (a unit slip in some rows) or sentinels.
    Corruption("fare_x1000_1pct", "domain", "fare", rows=_set_some("fare", _times(1000), 0.01), check="domain"),
    Corruption("fare_x1000_5pct", "domain", "fare", rows=_set_some("fare", _times(1000), 0.05), check="domain"),
    Corruption("trip_miles_99999_3pct", "domain", "trip_miles", rows=_set_some("trip_miles", "99999.0", 0.03),
               check="domain"),
    Corruption("trip_seconds_minus1_2pct", "domain", "trip_seconds", rows=_set_some("trip_seconds", "-1", 0.02),
               check="domain"),
    Corruption("pickup_latitude_zero_3pct", "domain", "pickup_latitude",
               rows=_set_some("pickup_latitude", "0.0", 0.03), check="domain"),
    # Time: event times that do not belong to the span.
    Corruption("timestamp_plus_7h", "time", "trip_start_hour", rows=_timestamp(lambda t: t + 7 * 3600),
               check="consistency", also=("trip_start_timestamp", "trip_start_day")),
    Corruption("timestamp_in_ms", "time", "trip_start_timestamp", rows=_timestamp(lambda t: t * 1000),
               check="consistency"),
    Corruption("last_years_file", "time", "trip_start_timestamp", months_before=12, check="consistency",
               also=("trip_start_month",)),
    Corruption("timestamp_minus_40_days", "time", "trip_start_timestamp", rows=_timestamp(lambda t: t - 40 * 86400),
               check="consistency", also=("trip_start_day",)),
    # Derived fields computed another way than from the event time.
    Corruption("hour_in_chicago_time", "derived", "trip_start_hour",
               rows=_derived("trip_start_hour", lambda h: (h - 6) % 24), check="consistency"),
    Corruption("weekday_monday_first", "derived", "trip_start_day",
               rows=_derived("trip_start_day", lambda d: (d - 2) % 7 + 1), check="consistency"),
    Corruption("month_zero_based", "derived", "trip_start_month",
               rows=_derived("trip_start_month", lambda m: m - 1), check="consistency"),
    Corruption("hour_wrong_in_10pct", "derived", "trip_start_hour",
               rows=_derived("trip_start_hour", lambda h: (h + 12) % 24, 0.10), check="consistency"),
    # The label as label_fn computes it goes wrong while tips and fare stay near their months.
    Corruption("tips_capped_at_20pct", "label", "tips_xf", rows=_tips(lambda t, f: min(t, 0.2 * f)), check="label"),
    Corruption("tips_over_20pct_for_all", "label", "tips_xf", rows=_tips(lambda t, f: max(t, 0.25 * f)),
               check="label"),
    Corruption("label_flipped", "label", "tips_xf",
               rows=_tips(lambda t, f: 0.1 * f if t > 0.2 * f else 0.3 * f), check="label"),
    # A column detached from its rows (a join on the wrong key): every marginal is a real
    # month's, so no data check can see it; the model's quality on the new span can.
    Corruption("payment_type_shuffled", "join", "<model>", rows=lambda rows: _shuffled(rows, "payment_type")),
    # Bytes that are not text, anywhere in the file.
    Corruption("binary_at_start", "bytes", "UTF-8", raw=_insert_bytes("start")),
    Corruption("binary_in_middle", "bytes", "UTF-8", raw=_insert_bytes("middle")),
    Corruption("binary_at_end", "bytes", "UTF-8", raw=_insert_bytes("end")),
    Corruption("nul_padding_at_end", "bytes", "NUL", raw=lambda data: data + b"\x00" * 4096),
    Corruption("gzipped_csv", "bytes", "gzip", raw=lambda data: __import__("gzip").compress(data, mtime=0)),
)
BY_NAME = {c.name: c for c in CORRUPTIONS}


def read_rows(data_root: str, span: int) -> tuple[list[str], Rows]:
    with open(os.path.join(spans.span_dir(data_root, span), "data.csv"), newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def move_to_span(rows: Rows, span: int) -> Rows:
    """Real trips moved into another month: each keeps its day (within the month's length)
    and time of day, and the fields derived from its start (month, weekday with Sunday 1)
    follow, so the month is consistent with itself as a real month is."""
    year, month = divmod(span, 100)
    last = calendar.monthrange(year, month)[1]
    moved = []
    for r in rows:
        start = dt.datetime.fromtimestamp(int(r["trip_start_timestamp"]), dt.timezone.utc)
        start = start.replace(year=year, month=month, day=min(start.day, last))
        moved.append({**r, "trip_start_timestamp": str(int(start.timestamp())), "trip_start_month": str(month),
                      "trip_start_day": str(start.isoweekday() % 7 + 1)})
    return moved


def to_csv(header: list[str], rows: Rows) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[r[h] for h in header] for r in rows])
    return out.getvalue().encode("utf-8")


def write_corrupted(data_root: str, source_span: int, corruption: Corruption, out_root: str, out_span: int) -> str:
    """Writes `corruption` of `source_span`'s data as span `out_span` under `out_root` (the
    trips moved into `out_span`'s month first, when it is another month)."""
    header, rows = read_rows(data_root, spans.shift_span(source_span, -corruption.months_before))
    if out_span != source_span:
        rows = move_to_span(rows, out_span)
    data = to_csv(header, corruption.rows(rows) if corruption.rows else rows)
    if corruption.raw:
        data = corruption.raw(data)
    folder = spans.span_dir(out_root, out_span)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "data.csv")
    with open(path, "wb") as f:
        f.write(data)
    return path
