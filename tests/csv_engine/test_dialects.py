"""CSV as exporters really write it: one month of taxi trips written in every dialect of
tests/dialects.py (quoted headers and cells, a UTF-8 byte-order mark, CRLF and LF, cells
holding commas, quotes and line breaks, pandas' writer) gives the plain file's examples,
byte for byte, and its statistics, through both ingestion engines; and the plain file's
examples are TFX's own. What is not a comma-separated UTF-8 CSV is refused naming the file,
the line and the byte."""

from __future__ import annotations

import ast
import csv
import glob
import gzip
import io
import os
import re

import pytest
import tensorflow as tf
from tfx.components.example_gen.csv_example_gen import executor as tfx_csv_executor
from tfx.types import artifact_utils

from components.data_gate import measures
from components.example_gen import executor
from components.example_gen.settings import IngestSettings
from components.statistics_gen import compare
from components.statistics_gen import executor as statistics_executor
from core import csv_header
from csv_engine import csv_encoding, fast_csv
from runner import preflight
from tests import dialects
from tests.conftest import REPO, TAXI_SCHEMA
from tests.csv_engine.test_fast_csv import _exec_properties, _run

ROWS = 300
# Cells exporters quote: commas, quotes, line breaks, unicode (the `company` column of a few rows).
AWKWARD = ['Taxi Affiliation Services, LLC', 'Blue "Ribbon" Taxi', "Dispatch\nTaxi", '"Chicago" Carriage, Cab\nCorp',
           'ü, "é"\n中文']
# Chunks of a few rows: the quote-free ones are parsed by Arrow, the others by `csv`.
CHUNK_BYTES = 4096
ENGINES = ("fast", "beam")


def _month() -> tuple[list[str], list[list[str]]]:
    """The first ROWS trips of the embedded 2016 spans, as text, a few with awkward cells."""
    header, rows = dialects.embedded_trips(ROWS)
    company = header.index("company")
    for i, cell in enumerate(AWKWARD):
        rows[100 + 7 * i][company] = cell
    return header, rows


@pytest.fixture(scope="module")
def months(tmp_path_factory):
    """Input folder with one `<dialect>/data.csv` per dialect."""
    root = tmp_path_factory.mktemp("dialects")
    header, rows = _month()
    for name in dialects.DIALECTS:
        os.makedirs(root / name)
        (root / name / "data.csv").write_bytes(dialects.write(name, header, rows))
    return root


def _ingest(months, dialect: str, engine: str, out: str):
    return _run(executor.Executor, out, _exec_properties(str(months), f"{dialect}/*.csv", IngestSettings(engine=engine)))


def _records(examples, canonical: bool = False) -> dict[str, list[bytes]]:
    """Split -> its examples' bytes as written, in the order of its files (the fast engine's:
    input order); `canonical`: each example serialized deterministically (TFX's executor
    writes map entries in an order of its own)."""
    out = {}
    for split in artifact_utils.decode_split_names(examples.split_names):
        files = sorted(glob.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*")))
        out[split] = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
        if canonical:
            out[split] = [tf.train.Example.FromString(r).SerializeToString(deterministic=True) for r in out[split]]
    return out


def _statistics(examples) -> dict[str, bytes]:
    """Split -> its statistics as StatisticsGen computes them (the in-memory engine, the gate's options)."""
    out = {}
    for split in artifact_utils.decode_split_names(examples.split_names):
        stats, _ = statistics_executor.split_statistics(examples, split, measures.stats_options())
        out[split] = stats
    return out


@pytest.fixture(scope="module")
def plain(months, tmp_path_factory):
    """The plain file through both engines, and through TFX's own executor."""
    out = tmp_path_factory.mktemp("plain")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_csv, "CHUNK_BYTES", CHUNK_BYTES)
        result = {engine: _ingest(months, dialects.PLAIN, engine, str(out / engine)) for engine in ENGINES}
    result["tfx"] = _run(tfx_csv_executor.Executor, str(out / "tfx"),
                         _exec_properties(str(months), f"{dialects.PLAIN}/*.csv"))
    return result


def test_the_plain_month_gives_tfxs_examples_through_both_engines(plain):
    expected = {split: sorted(records) for split, records in _records(plain["tfx"], canonical=True).items()}
    assert sum(len(v) for v in expected.values()) == ROWS
    for engine in ENGINES:
        assert {split: sorted(r) for split, r in _records(plain[engine], canonical=True).items()} == expected, engine
    # The awkward cells reached the examples whole: a comma, quotes, a line break.
    companies = {tf.train.Example.FromString(r).features.feature["company"].bytes_list.value[0].decode()
                 for records in expected.values() for r in records
                 if tf.train.Example.FromString(r).features.feature["company"].bytes_list.value}
    assert set(AWKWARD) <= companies


@pytest.mark.parametrize("engine", ["fast", pytest.param("beam", marks=pytest.mark.slow)])
@pytest.mark.parametrize("dialect", [d for d in dialects.DIALECTS if d != dialects.PLAIN])
def test_each_dialect_gives_the_plain_files_examples_and_statistics(months, plain, dialect, engine, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setattr(fast_csv, "CHUNK_BYTES", CHUNK_BYTES)
    ours = _ingest(months, dialect, engine, str(tmp_path / "out"))
    assert ours.split_names == plain[engine].split_names
    records, expected = _records(ours), _records(plain[engine])
    if engine == "beam":  # Beam writes its shards in an order of its own
        records, expected = ({s: sorted(r) for s, r in x.items()} for x in (records, expected))
    assert records == expected
    stats, plain_stats = _statistics(ours), _statistics(plain[engine])
    for split, split_stats in stats.items():
        [dataset], [plain_dataset] = split_stats.datasets, plain_stats[split].datasets
        if engine == "fast":  # the same examples in the same order: the same proto, bit for bit
            assert split_stats.SerializeToString(deterministic=True) == plain_stats[split].SerializeToString(
                deterministic=True), split
        else:  # the same examples in another order: sums added in another order
            assert compare.by_feature(dataset) == compare.by_feature(plain_dataset), split
        assert dataset.num_examples == len(records[split])
    # Every file passes the checks a run makes first, with the plain file's row count.
    assert preflight.check_csv_structure(str(months / dialect / "data.csv")) == ROWS


def test_the_header_rule_reads_quoted_names_and_a_byte_order_mark():
    plain = csv_header.parse_header(b"a,b c,d\n")
    for line in (b'"a","b c","d"\r\n', b'\xef\xbb\xbfa,b c,d\r\n', b'\xef\xbb\xbf"a","b c","d"\n', b'a,"b c",d\n',
                 b'  a,b c,d  \n'):
        assert csv_header.parse_header(line) == plain, line
    # Escaped quotes and a comma inside a quoted name.
    assert csv_header.parse_header(b'"say ""hi""","x,y"\n') == ['say "hi"', "x,y"]
    # A header without quotes and without a mark: exactly TFX's names (`strip().split(",")`).
    for line in (b"a, b ,c\n", b"a,,b\r\n", b"\n", b"", b"x\n", b" a\tb ,c\n"):
        assert csv_header.parse_header(line) == line.decode().strip().split(","), line


def test_tfx_keeps_header_quotes_and_the_byte_order_mark_in_its_names(months):
    """Why TFX's own executor is not the reference for those files (its io_utils reads the
    header with `strip().split(",")`), while ours gives the plain file's names."""
    from tfx.utils import io_utils

    plain = csv_header.read_header(str(months / dialects.PLAIN / "data.csv"))[0]
    stock = {d: io_utils.load_csv_column_names(str(months / d / "data.csv")) for d in dialects.DIALECTS}
    assert stock["quote_all"] == [f'"{name}"' for name in plain]
    assert stock["bom"] == ["\ufeff" + plain[0], *plain[1:]]
    assert {d for d, names in stock.items() if names == plain} == {dialects.PLAIN, "crlf", "no_final_line_end", "pandas"}
    for d in dialects.DIALECTS:
        assert csv_header.read_header(str(months / d / "data.csv"))[0] == plain, d


# --- refusals: the file, the line and the byte --------------------------------------------------


def _taxi_text() -> tuple[list[str], list[list[str]]]:
    header, rows = _month()
    return header, rows[:40]


def _refused(tmp_path, data: bytes) -> tuple[str, str]:
    """What the checks before a run say of a span holding `data` (the exit-2 message)."""
    folder = tmp_path / "span-201612"
    folder.mkdir()
    path = folder / "data.csv"
    path.write_bytes(data)
    with pytest.raises(preflight.InputError) as refused:
        preflight.check_span_files(str(folder), TAXI_SCHEMA)
    return str(path), str(refused.value)


def _plain_bytes(header, rows, line_end="\n") -> bytes:
    return dialects.write(dialects.PLAIN, header, rows).replace(b"\n", line_end.encode())


@pytest.mark.parametrize("delimiter, named", [(";", "';'"), ("\t", "a tab"), ("|", "'|'")])
@pytest.mark.parametrize("quoted", [False, True], ids=["minimal", "quote_all"])
def test_another_delimiter_is_refused_naming_it_by_the_checks_and_both_engines(tmp_path, delimiter, named, quoted):
    header, rows = _taxi_text()
    text = "".join(delimiter.join(f'"{c}"' if quoted else c for c in row) + "\n" for row in [header, *rows])
    path, message = _refused(tmp_path, text.encode())
    assert message.startswith(f"{path}, line 1 (byte ") and f"looks delimited by {named}" in message, message
    byte = int(message.split("(byte ")[1].split(")")[0])
    assert text.encode()[byte:byte + 1] == delimiter.encode(), message  # the byte is the delimiter's
    for engine in ENGINES:  # never read as a one-column month
        with pytest.raises(csv_encoding.CsvInputError, match=f"line 1 .*looks delimited by {named}"):
            _run(executor.Executor, str(tmp_path / engine),
                 _exec_properties(str(tmp_path), "span-201612/*.csv", IngestSettings(engine=engine)))


def test_a_ragged_row_is_refused_naming_file_line_and_byte(tmp_path):
    header, rows = _taxi_text()
    rows[10] = rows[10] + ["extra"]
    data = _plain_bytes(header, rows, "\r\n")
    path, message = _refused(tmp_path, data)
    start = _line_start(data, 12)
    assert message == (f"{path}, row 11 (line 12): 19 field(s) where the header has 18: more fields than the header"
                       f" (the row starts at byte {start})")
    assert data[start:].startswith(",".join(rows[10]).encode())


def test_a_cut_last_line_is_refused_naming_file_line_and_byte(tmp_path):
    header, rows = _taxi_text()
    data = _plain_bytes(header, rows)[:-30]
    path, message = _refused(tmp_path, data)
    assert message.startswith(f"{path}, row 40 (line 41): ") and "the last line is cut short" in message, message
    assert message.endswith(f"(the row starts at byte {_line_start(data, 41)})")


def test_a_quoted_cell_cut_by_the_end_of_the_file_is_refused_naming_where_its_row_starts(tmp_path):
    header, rows = _taxi_text()
    rows[-1][header.index("company")] = "Dispatch\nTaxi, and more"
    data = dialects.write("quote_all", header, rows)
    data = data[:data.rindex(b"Taxi, and")]  # the upload stopped inside the quoted cell
    path, message = _refused(tmp_path, data)
    start = _line_start(data, 41)
    assert message == (f"{path}, row 40 (line 41): a quoted field is never closed: the file is truncated"
                       f" (the row starts at byte {start})")
    for engine in ENGINES:  # both engines refuse it too
        with pytest.raises(Exception, match="unbalanced quotes"):
            _run(executor.Executor, str(tmp_path / engine),
                 _exec_properties(str(tmp_path), "span-201612/*.csv", IngestSettings(engine=engine)))


@pytest.mark.parametrize("where", ["header", "row"])
def test_bytes_that_are_not_utf8_are_refused_naming_file_line_and_byte(tmp_path, where):
    header, rows = _taxi_text()
    data = dialects.write("bom", header, rows)
    at = data.index(b"pickup") + 3 if where == "header" else _line_start(data, 6) + 2
    data = data[:at] + "é".encode("latin-1") + data[at:]  # one cell saved as Latin-1
    path, message = _refused(tmp_path, data)
    line = 1 if where == "header" else 6
    assert message.startswith(f"{path}, line {line} (byte {at}): not valid UTF-8"), message


def test_a_header_whose_quoted_name_is_not_closed_is_refused(tmp_path):
    header, rows = _taxi_text()
    data = dialects.write("quote_all", header, rows).replace(b'"tips"', b'"tips', 1)
    opened = data.index(b'"tips')
    path, message = _refused(tmp_path, data)
    assert message == (f"{path}, line 1 (byte {opened}): the header's quoted column name is not closed on its line"
                       " (a column name cannot hold a line break)")


def test_a_byte_order_mark_and_quoted_names_pass_the_span_checks(tmp_path):
    """The checks of a span before a run read the header by the same rule: a span whose
    files are an Excel export and a plain file has one header, the schema's."""
    from core import spans

    header, rows = _taxi_text()
    folder = tmp_path / "span-201612"
    folder.mkdir()
    (folder / "a.csv").write_bytes(dialects.write("excel_csv_utf8", header, rows))
    (folder / "b.csv").write_bytes(dialects.write("quote_all", header, rows))
    (folder / "c.csv").write_bytes(dialects.write(dialects.PLAIN, header, rows))
    spans.check_span_csv(str(folder))
    preflight.check_span_files(str(folder), TAXI_SCHEMA)


def _line_start(data: bytes, line: int) -> int:
    at = 0
    for _ in range(line - 1):
        at = data.index(b"\n", at) + 1
    return at


# --- the set-up guide's list -----------------------------------------------------------------

GUIDE = os.path.join(REPO, "docs", "guides", "setup.md")
_LITERAL = r"`(b'(?:[^'\\]|\\.)*')`"


def _guide_examples() -> tuple[list[bytes], list[tuple[bytes, str]]]:
    """The accepted files and the refused ones with their messages, from the guide's section."""
    text = open(GUIDE, encoding="utf-8").read()
    section = text.split("## What a span CSV may look like", 1)[1].split("\n## ", 1)[0]
    accepted, refused = section.split("**Accepted**", 1)[1].split("**Refused**", 1)
    return ([ast.literal_eval(m) for m in re.findall(_LITERAL, accepted)],
            [(ast.literal_eval(m), message) for m, message in re.findall(_LITERAL + r":\s*`([^`]*)`", refused)])


def _run_checks(root) -> None:
    """What `retrain run` checks of span 201612's files before it writes anything."""
    from core import spans

    spans.resolve_span(str(root), 201612)
    preflight.check_span_structure(spans.span_dir(str(root), 201612))


def _span(root, data: bytes) -> str:
    os.makedirs(root / "span-201612")
    path = root / "span-201612" / "data.csv"
    path.write_bytes(data)
    return str(path)


def _examples_bytes(path: str, out) -> bytes:
    fast_csv.ingest([path], [str(out)], [1], workers=0)
    return b"".join(gzip.decompress(open(f, "rb").read()) for f in sorted(glob.glob(os.path.join(out, "*"))))


def test_the_guides_accepted_files_give_the_examples_of_their_cells_written_plainly(tmp_path):
    accepted, _ = _guide_examples()
    assert len(accepted) == 6
    for i, data in enumerate(accepted):
        root = tmp_path / str(i)
        path = _span(root / "as-written", data)
        _run_checks(root / "as-written")
        cells = [row for row in csv.reader(io.StringIO(data.decode("utf-8-sig"), newline="")) if row]
        plain = _span(root / "plain", dialects.write(dialects.PLAIN, cells[0], cells[1:]))
        assert _examples_bytes(path, root / "out") == _examples_bytes(plain, root / "plain-out"), data
        assert csv_header.read_header(path)[0] == ["fare", "company"], data


def test_the_guides_refused_files_are_refused_with_the_message_it_shows(tmp_path):
    from core.errors import BadInput

    _, refused = _guide_examples()
    assert len(refused) == 6
    for i, (data, message) in enumerate(refused):
        root = tmp_path / str(i)
        _span(root, data)
        with pytest.raises(BadInput) as e:
            _run_checks(root)
        assert str(e.value).replace(f"{root}{os.sep}", "") == message, data
