"""The header of a span's CSV file: the one rule every reader of span CSVs gets its column names from.

Both ingestion engines (the fast engine and the Beam path of CsvExampleGen's executor), the
checks before a run and the span checks read column names here, so they never disagree.

The header is the file's first line (up to and including its first b"\\n", as CsvExampleGen's
record reader skips it), read as one CSV record:
- a UTF-8 byte-order mark at its start (Excel's "CSV UTF-8") is not part of the first name;
- it is UTF-8 text without NUL bytes;
- surrounding whitespace and the line end (LF or CRLF) are not part of the names;
- names may be quoted, with `""` for a quote inside one (RFC 4180; Python's `csv.QUOTE_ALL`,
  `QUOTE_NONNUMERIC`, many BI tools and warehouse unloads quote every header field).
For a header without quotes and without a byte-order mark, the names are exactly TFX's
(`io_utils.load_csv_column_names`: `strip().split(",")`), so its examples stay TFX's.

What the rule refuses, naming the file, line 1 and the byte: bytes that are not UTF-8, a NUL
byte, a quoted name not closed on the first line (a name cannot hold a line break), a name
quoted and then continued (`"a"b`), and a header without a second column that holds `;`, a
tab or `|`: a file delimited by another character, which would otherwise be read as one column.
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from typing import BinaryIO

from core.errors import BadInput

UTF8_BOM = b"\xef\xbb\xbf"
# Delimiters other exporters use; a one-column header holding one of them is such a file.
OTHER_DELIMITERS = {";": "';'", "\t": "a tab", "|": "'|'"}


class CsvInputError(BadInput):
    """A CSV file that ingestion refuses (as CsvExampleGen would, or a header it would misread),
    naming the file, the line and, where it helps, the byte."""


def parse_header(first_line: bytes, path: str = "<csv>") -> list[str]:
    """The column names of a CSV file's first line (the module's rule).

    Args:
      first_line: the file's bytes up to and including its first newline (all of them when
        it has none).
      path: the file, for error messages.

    Raises:
      CsvInputError: a header the rule refuses, naming the file, line 1 and the byte.
    """
    start = len(UTF8_BOM) if first_line.startswith(UTF8_BOM) else 0
    try:
        text = first_line[start:].decode("utf-8")
    except UnicodeDecodeError as e:
        at = start + e.start
        raise CsvInputError(f"{path}, line 1 (byte {at}): not valid UTF-8 ({e.reason}:"
                            f" {first_line[at:at + 4]!r}); is it a CSV text file?") from e

    def byte(i: int) -> int:
        """The byte in the file of the character `text[i]`."""
        return start + len(text[:i].encode("utf-8"))

    if "\x00" in text:
        raise CsvInputError(f"{path}, line 1 (byte {byte(text.index(chr(0)))}): a NUL byte in the header; is it a CSV"
                            " text file?")
    stripped = text.strip()
    offset = text.index(stripped) if stripped else 0
    if '"' not in stripped:
        names, problem = stripped.split(","), None
    else:
        opened = _unclosed_quote(stripped)
        if opened is not None:
            raise CsvInputError(f"{path}, line 1 (byte {byte(offset + opened)}): the header's quoted column name"
                                " is not closed on its line (a column name cannot hold a line break)")
        try:
            names, problem = next(csv.reader([stripped], strict=True)), None
        except csv.Error as e:
            names, problem = [], e
    if len(names) <= 1:  # one column, or not CSV with commas: another delimiter?
        for char, name in OTHER_DELIMITERS.items():
            if char in stripped:
                raise CsvInputError(
                    f"{path}, line 1 (byte {byte(offset + stripped.index(char))}): the header"
                    f" {stripped[:200]!r} is not comma-separated but holds {name}: the file looks delimited by"
                    f" {name}; span CSV files are comma-separated (export it with ',' as the delimiter)")
    if problem is not None:
        raise CsvInputError(f"{path}, line 1 (byte {byte(offset)}): the header is not a valid CSV record"
                            f" ({problem}): {stripped[:200]!r}") from problem
    return names


def _unclosed_quote(text: str) -> int | None:
    """Where a quoted field left open at the end of `text` opens, or None: as `csv` reads a
    record, a quote opens a field only at its start (elsewhere it is a character of the
    field), and `""` inside a quoted field is a quote."""
    opened, i = None, 0
    while i < len(text):
        char = text[i]
        if opened is None:
            if char == '"' and (i == 0 or text[i - 1] == ","):
                opened = i
        elif char == '"':
            if text[i + 1:i + 2] == '"':
                i += 1
            else:
                opened = None
        i += 1
    return opened


def read_header(path: str, opener: Callable[[str], BinaryIO] | None = None) -> tuple[list[str], int]:
    """A file's column names and where its data begin (after its first line).

    Args:
      path: the CSV file.
      opener: opens `path` for reading bytes (default: the local filesystem's `open(path, "rb")`;
        the Beam path passes TFX's `fileio` for other filesystems).

    Raises:
      CsvInputError: a header the rule refuses.
    """
    with (opener or _open_local)(path) as f:
        first = f.readline()
    return parse_header(first, path), len(first)


def _open_local(path: str) -> BinaryIO:
    return open(path, "rb")


def split_columns(paths: list[str], opener: Callable[[str], BinaryIO] | None = None) -> tuple[list[str], list[int]]:
    """The column names the files of one split share, and where each file's data begin.

    Raises:
      CsvInputError: a header the rule refuses, or files whose headers differ.
    """
    names, starts = None, []
    for path in paths:
        columns, start = read_header(path, opener)
        if names is None:
            names = columns
        elif columns != names:
            raise CsvInputError(
                f"{path}, line 1: its header differs from {paths[0]}'s (files of one span must have the same columns):"
                f" {columns} vs {names}")
        starts.append(start)
    return names or [], starts
