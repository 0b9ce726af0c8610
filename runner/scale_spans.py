"""Taxi-like spans of any size, resampled from the embedded taxi data (for scale runs).

The rule, so anyone can rebuild the same files: with numpy's default_rng(seed + span),
rows are drawn with replacement from every embedded month (15,002 trips); each drawn trip
keeps its areas, tracts, coordinates, company and payment type, and its start hour; fare
and tips are scaled by one factor (log-normal, sigma 0.1, so whether the tip is above 20%
of the fare is kept), trip miles and seconds by another (sigma 0.1); the start is moved to
a random day of the span's month at the trip's hour and a random quarter hour, and
trip_start_month / trip_start_day (1 = Sunday) / trip_start_timestamp follow it. Cells
are written as the embedded files write them (no quotes, empty cells stay empty).

    retrain scale-spans --rows 10000000 --span 201612 --out /data/taxi-10m
"""

from __future__ import annotations

import calendar
import datetime as dt
import glob
import os
import shutil
from collections.abc import Callable

from core import project, spans

DEFAULT_SOURCE = project.path("data", "taxi")
_CHUNK_ROWS = 500_000
_MONEY = ("fare", "tips")
_TRIP = ("trip_miles", "trip_seconds")


def _source(source_root: str):
    """Every embedded taxi row as strings (pyarrow table), with the header's column order."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    paths = sorted(glob.glob(os.path.join(source_root, "span-*", "*.csv")))
    if not paths:
        raise spans.SpanError(f"no taxi spans under {source_root!r} to resample")
    with open(paths[0], encoding="utf-8") as f:
        names = f.readline().strip().split(",")
    tables = [pa_csv.read_csv(p, convert_options=pa_csv.ConvertOptions(
        column_types={n: pa.string() for n in names}, strings_can_be_null=False)) for p in paths]
    return names, pa.concat_tables(tables)


def _scaled(column, factor, decimals: int):
    """A numeric string column times a per-row factor, written with `decimals` decimals
    (0: an integer); empty cells stay empty."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    empty = pc.equal(column, "")
    values = pc.cast(pc.if_else(empty, "0", column), pa.float64()).to_numpy(zero_copy_only=False) * factor
    scaled = np.round(values * 10**decimals).astype(np.int64)
    text = pa.array(scaled // 10**decimals).cast(pa.string())
    if decimals:
        fraction = pc.utf8_lpad(pa.array(scaled % 10**decimals).cast(pa.string()), decimals, "0")
        text = pc.binary_join_element_wise(text, fraction, ".")
    return pc.if_else(empty, "", text)


def _joined_bytes(lines) -> bytes:
    """The concatenated values of a string array (one buffer slice, no Python strings)."""
    import numpy as np

    offsets = np.frombuffer(lines.buffers()[1], np.int32)[lines.offset:lines.offset + len(lines) + 1]
    return lines.buffers()[2].to_pybytes()[offsets[0]:offsets[-1]]


def _chunk(names: list[str], source, rng, rows: int, span: int) -> bytes:
    """`rows` resampled rows as CSV lines."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    table = source.take(pa.array(rng.integers(0, source.num_rows, rows)))
    money = np.exp(rng.normal(0, 0.1, rows))
    trip = np.exp(rng.normal(0, 0.1, rows))
    year, month = divmod(span, 100)
    days = calendar.monthrange(year, month)[1]
    day = rng.integers(1, days + 1, rows)
    hour = pc.cast(table.column("trip_start_hour").combine_chunks(), pa.int64()).to_numpy(zero_copy_only=False)
    first = dt.datetime(year, month, 1, tzinfo=dt.timezone.utc).timestamp()
    stamp = (first + (day - 1) * 86400 + hour * 3600 + rng.integers(0, 4, rows) * 900).astype(np.int64)
    # 1 = Sunday, as the Chicago data counts (Python's weekday(): Monday = 0).
    weekday = (np.array([(dt.date(year, month, 1).weekday() + 1) % 7], np.int64) + day - 1) % 7 + 1
    columns = {}
    for name in names:
        column = table.column(name).combine_chunks()
        if name in _MONEY:
            column = _scaled(column, money, 2)
        elif name == "trip_miles":
            column = _scaled(column, trip, 2)
        elif name == "trip_seconds":
            column = _scaled(column, trip, 0)
        elif name == "trip_start_timestamp":
            column = pa.array(stamp).cast(pa.string())
        elif name == "trip_start_month":
            column = pa.array(np.full(rows, month)).cast(pa.string())
        elif name == "trip_start_day":
            column = pa.array(weekday).cast(pa.string())
        columns[name] = column
    line = pc.binary_join_element_wise(*[columns[n] for n in names], ",")
    return _joined_bytes(pc.binary_join_element_wise(line, "", "\n"))


def write_spans(out_root: str, span_numbers: list[int], rows: int, seed: int = 0, source_root: str = DEFAULT_SOURCE,
                progress: Callable[[int, int, int], None] = lambda span, done, total: None) -> dict[int, int]:
    """Writes `span-YYYYMM/data.csv` of `rows` rows for each span; returns rows per span.

    Each span folder appears whole (written beside it, then renamed); an existing span
    folder is never written over.

    Raises:
      spans.SpanError: a bad row count, no source data, or span folders that already exist.
    """
    import numpy as np

    if rows < 1:
        raise spans.SpanError(f"--rows must be at least 1, got {rows}")
    clashes = [s for s in span_numbers if os.path.exists(spans.span_dir(out_root, s))]
    if clashes:
        raise spans.SpanError(f"span folders already exist under {out_root!r}: {clashes}")
    names, source = _source(source_root)
    for span in span_numbers:
        final = spans.span_dir(out_root, span)
        tmp = final + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        rng = np.random.default_rng(seed + span)
        with open(os.path.join(tmp, "data.csv"), "wb") as f:
            f.write((",".join(names) + "\n").encode())
            for start in range(0, rows, _CHUNK_ROWS):
                n = min(_CHUNK_ROWS, rows - start)
                f.write(_chunk(names, source, rng, n, span))
                progress(span, start + n, rows)
        os.rename(tmp, final)
    return {s: rows for s in span_numbers}
