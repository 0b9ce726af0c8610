"""One month of rows written as CSV exporters really write it: every dialect a span may
arrive in (quoted headers and cells, a UTF-8 byte-order mark, CRLF or LF, no final line
end, blank lines), by Python's `csv` module with different settings and by pandas.

Every writer writes the same cell text: only quoting, line ends and the byte-order mark
differ, so each file must give the examples (and statistics) of the plain file.
"""

from __future__ import annotations

import csv
import glob
import io
import os
from collections.abc import Callable

BOM = "\ufeff"
Rows = list[list[str]]


def _lines(rows: Rows, **settings) -> str:
    out = io.StringIO()
    csv.writer(out, **settings).writerows(rows)
    return out.getvalue()


def _writer(**settings) -> Callable[[list[str], Rows], bytes]:
    return lambda header, rows: _lines([header, *rows], **settings).encode("utf-8")


class _Number(str):
    """A cell's text that `csv.QUOTE_NONNUMERIC` writes unquoted, exactly as it reads (a
    float would be written by its repr: 0.20 as 0.2, a different cell)."""

    def __float__(self) -> float:
        return float(str(self))


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _quote_nonnumeric(header: list[str], rows: Rows) -> bytes:
    rows = [[_Number(c) if c and _is_number(c) else c for c in row] for row in rows]
    return _writer(quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")(header, rows)


def _with_bom(write: Callable[[list[str], Rows], bytes]) -> Callable[[list[str], Rows], bytes]:
    return lambda header, rows: BOM.encode("utf-8") + write(header, rows)


def _pandas(**settings) -> Callable[[list[str], Rows], bytes]:
    def write(header: list[str], rows: Rows) -> bytes:
        import pandas as pd

        out = io.BytesIO()
        pd.DataFrame(rows, columns=header, dtype=str).to_csv(out, index=False, **settings)
        return out.getvalue()

    return write


def _mix(header: list[str], rows: Rows) -> bytes:
    """A hand-made export: a byte-order mark, the header quoted, some rows quoted whole and
    others only where needed, CRLF and LF alternating, blank lines, no final line end."""
    parts = [BOM + _lines([header], quoting=csv.QUOTE_ALL, lineterminator="\r\n")]
    for i, row in enumerate(rows):
        quoting = csv.QUOTE_ALL if i % 3 == 0 else csv.QUOTE_MINIMAL
        parts.append(_lines([row], quoting=quoting, lineterminator="\r\n" if i % 2 else "\n"))
        if i % 50 == 7:
            parts.append("\n")
    return "".join(parts).rstrip("\r\n").encode("utf-8")


PLAIN = "plain"
# Dialect name -> writer(header, rows) -> the file's bytes. `plain` is the reference: what
# `spans.write_span` writes (csv's default quoting, LF).
DIALECTS: dict[str, Callable[[list[str], Rows], bytes]] = {
    PLAIN: _writer(lineterminator="\n"),
    "crlf": _writer(),  # csv's default dialect, `excel`: CRLF line ends
    "quote_all": _writer(quoting=csv.QUOTE_ALL, lineterminator="\n"),
    "quote_all_crlf": _writer(quoting=csv.QUOTE_ALL),
    "quote_nonnumeric": _quote_nonnumeric,
    "unix": _writer(dialect="unix"),  # every field quoted, LF
    "bom": _with_bom(_writer(lineterminator="\n")),
    "excel_csv_utf8": _with_bom(_writer()),  # Excel's "CSV UTF-8": a byte-order mark, CRLF
    "bom_quote_all_crlf": _with_bom(_writer(quoting=csv.QUOTE_ALL)),
    "no_final_line_end": lambda header, rows: _writer(lineterminator="\n")(header, rows).rstrip(b"\n"),
    "pandas": _pandas(),
    "pandas_quote_all_bom_crlf": _pandas(quoting=csv.QUOTE_ALL, encoding="utf-8-sig", lineterminator="\r\n"),
    "mix": _mix,
}


def write(dialect: str, header: list[str], rows: Rows) -> bytes:
    """The month's file in a dialect of DIALECTS."""
    return DIALECTS[dialect](header, rows)


def embedded_trips(rows: int) -> tuple[list[str], list[list[str]]]:
    """The header and the first `rows` trips of the embedded 2016 taxi spans, as CSV cells
    (one month's worth for the CSV dialect and Parquet writer tests)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out: list[list[str]] = []
    for path in sorted(glob.glob(os.path.join(repo, "data", "taxi", "span-2016*", "data.csv"))):
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            header = next(reader)
            out += list(reader)
    return header, out[:rows]
