"""A corpus of corrupted spans, generated from real embedded months (tests and benchmarks/gates).

Each corruption is one class of bad data the product must stop before Transform. Data
corruptions transform a month's rows (a list of dicts, every value a CSV string) and
name the feature the gate must blame; structural ones rewrite the file's bytes.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import random
from collections.abc import Callable

from core import spans

Rows = list[dict[str, str]]


@dataclasses.dataclass(frozen=True)
class Corruption:
    name: str
    kind: str  # the class: scale, missing, category, volume, structure
    feature: str  # what the gate (or the input check) must name
    rows: Callable[[Rows], Rows] | None = None
    raw: Callable[[bytes], bytes] | None = None


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
)
BY_NAME = {c.name: c for c in CORRUPTIONS}


def read_rows(data_root: str, span: int) -> tuple[list[str], Rows]:
    with open(os.path.join(spans.span_dir(data_root, span), "data.csv"), newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def to_csv(header: list[str], rows: Rows) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[r[h] for h in header] for r in rows])
    return out.getvalue().encode("utf-8")


def write_corrupted(data_root: str, source_span: int, corruption: Corruption, out_root: str, out_span: int) -> str:
    """Writes `corruption` of `source_span`'s data as span `out_span` under `out_root`."""
    header, rows = read_rows(data_root, source_span)
    data = to_csv(header, corruption.rows(rows) if corruption.rows else rows)
    if corruption.raw:
        data = corruption.raw(data)
    folder = spans.span_dir(out_root, out_span)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "data.csv")
    with open(path, "wb") as f:
        f.write(data)
    return path
