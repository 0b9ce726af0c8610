"""One month of rows written as Parquet as writers really write it: pyarrow with each codec,
row-group size, dictionary encoding or not, large_string, narrow integers and float32;
pandas with and without its index column, with categoricals; a warehouse unload (decimals
for numbers, large_string); several files to a span.

Every writer writes the values the CSV cells hold, typed by the schema (INT an integer,
FLOAT a float, BYTES a string; an empty cell a null), so each must give the examples of
the same month as CSV (core/parquet_columns.py).
"""

from __future__ import annotations

import decimal
import os
from collections.abc import Callable

Rows = list[list[str]]
# Writes a header, rows (CSV cells) and the schema's type of each column into a span folder.
Writer = Callable[[str, list[str], Rows, dict[str, str]], None]


def _values(cells: list[str], kind: str, as_decimal: bool = False) -> list:
    if kind == "INT":
        return [decimal.Decimal(int(c)) if as_decimal and c else int(c) if c else None for c in cells]
    if kind == "FLOAT":
        return [decimal.Decimal(c) if as_decimal and c else float(c) if c else None for c in cells]
    return [c if c else None for c in cells]


def _scale(cells: list[str]) -> int:
    """The most digits after a decimal point among the cells (a decimal column's scale)."""
    return max((len(c.split(".", 1)[1]) for c in cells if "." in c), default=0)


def table(header: list[str], rows: Rows, types: dict[str, str], *, ints: str = "int64", floats: str = "float64",
          strings: str = "string", dictionary: bool = False, decimals: bool = False):
    """The rows as a pyarrow Table typed by the schema (nulls for empty cells)."""
    import pyarrow as pa

    arrays = []
    for i, name in enumerate(header):
        cells = [row[i] for row in rows]
        kind = types.get(name, "BYTES")
        if decimals and kind in ("INT", "FLOAT"):
            scale = 0 if kind == "INT" else _scale(cells)
            digits = max((len(c.replace("-", "").replace(".", "")) for c in cells if c), default=1)
            arrays.append(pa.array(_values(cells, kind, True), pa.decimal128(max(digits + scale, 18), scale)))
        elif kind == "INT":
            values = _values(cells, kind)
            narrow = ints == "int32" and all(v is None or -(2**31) <= v < 2**31 for v in values)
            arrays.append(pa.array(values, pa.int32() if narrow else pa.int64()))  # int32 where it fits
        elif kind == "FLOAT":
            arrays.append(pa.array(_values(cells, kind), getattr(pa, floats)()))
        else:
            array = pa.array(_values(cells, kind), getattr(pa, strings)())
            arrays.append(array.dictionary_encode() if dictionary else array)
    return pa.table(arrays, names=header)


def _pyarrow(name: str = "data.parquet", **table_args) -> Callable[..., Writer]:
    def settings(**write_args) -> Writer:
        def write(folder: str, header: list[str], rows: Rows, types: dict[str, str]) -> None:
            import pyarrow.parquet as pq

            os.makedirs(folder, exist_ok=True)
            pq.write_table(table(header, rows, types, **table_args), os.path.join(folder, name), **write_args)

        return write

    return settings


def _pandas(index: bool | None, categorical: bool = False, **write_args) -> Writer:
    def write(folder: str, header: list[str], rows: Rows, types: dict[str, str]) -> None:
        import pandas as pd

        frame = pd.DataFrame({name: pd.array(_values([r[i] for r in rows], types.get(name, "BYTES")),
                                             dtype={"INT": "Int64", "FLOAT": "float64"}.get(types.get(name), "object"))
                              for i, name in enumerate(header)})
        if categorical:
            for name in header:
                if types.get(name, "BYTES") == "BYTES":
                    frame[name] = frame[name].astype("category")
        # An index that is not a plain range (as after filtering rows), which pandas writes as
        # the column __index_level_0__ (unless index=False).
        frame.index = pd.Index([2 * i for i in range(len(frame))])
        os.makedirs(folder, exist_ok=True)
        frame.to_parquet(os.path.join(folder, "data.parquet"), index=index, **write_args)

    return write


def _several_files(folder: str, header: list[str], rows: Rows, types: dict[str, str]) -> None:
    """Three files, by three writers: int64, int32 and decimal integers; float64, float32 and
    decimal numbers; string, large_string and dictionary text."""
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    third = len(rows) // 3
    parts = [rows[:third], rows[third:2 * third], rows[2 * third:]]
    settings = [{}, {"ints": "int32", "floats": "float32", "strings": "large_string"},
                {"decimals": True, "dictionary": True}]
    for i, (part, args) in enumerate(zip(parts, settings)):
        pq.write_table(table(header, part, types, **args), os.path.join(folder, f"part-{i:05d}.parquet"),
                       row_group_size=max(1, len(part) // 2))


WRITERS: dict[str, Writer] = {
    "pyarrow": _pyarrow()(),
    "pyarrow_gzip_small_row_groups": _pyarrow()(compression="gzip", row_group_size=7),
    "pyarrow_zstd_no_dictionary": _pyarrow()(compression="zstd", use_dictionary=False),
    "pyarrow_brotli_large_string": _pyarrow(strings="large_string")(compression="brotli"),
    "pyarrow_lz4_int32_float32": _pyarrow(ints="int32", floats="float32")(compression="lz4"),
    "pyarrow_uncompressed_dictionary_columns": _pyarrow(dictionary=True)(compression="none"),
    "pyarrow_format_1_0": _pyarrow()(version="1.0", data_page_version="1.0"),
    "pandas_index_column": _pandas(index=None),
    "pandas_index_false_gzip": _pandas(index=False, compression="gzip"),
    "pandas_categoricals": _pandas(index=None, categorical=True),
    "warehouse_decimals": _pyarrow(name="000000_0.parquet", decimals=True, strings="large_string")(compression="zstd"),
    "several_files": _several_files,
}
