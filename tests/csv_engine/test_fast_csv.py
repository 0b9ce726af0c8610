"""The fast ingestion engine against TFX's own CsvExampleGen executor: the same examples in
the same splits with the same artifact properties, on the embedded spans and on CSV edge
cases (quotes, newlines in cells, empty cells, unicode, CRLF, numbers Python reads and
Arrow would not), chunked so that chunks disagree on column types; and the same refusals."""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os

import pytest
import tensorflow as tf
from tfx.components.example_gen.csv_example_gen import executor as tfx_csv_executor
from tfx.dsl.components.base import base_beam_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.utils import proto_utils

from components.example_gen import executor
from components.example_gen.settings import IngestSettings
from csv_engine import csv_encoding, fast_csv

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

HEADER = "id,price,count,name,note,empty,mixed,big\n"
# Each row exercises something: Python's int()/float() (whitespace, signs, underscores,
# nan/inf, exponents), quoted commas and newlines, doubled quotes, unicode, empty cells,
# integers beyond int64 (a STRING column in TFX), and a column whose type changes late.
ROWS = [
    '1,3.5,7,plain,a,,1,12\n',
    '2, 4.25 ,+8,"comma, inside","line\nbreak",,2,-3\n',
    '3,1e3,-9,"say ""hi""",é ü 中文,,3,99999999999999999999\n',
    '4,.5,1_000,tab\there,,,4,7\n',
    '\n',
    '5,nan,0, lead space,x,,5,8\n',
    '6,-inf,42,"",y,,6.5,9\n',
    '7,,,,,,,\n',
    '8,2.0,3,crlf,,,,\r\n',
]


def _write(folder, name, text: str):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8", newline="") as f:
        f.write(text)


def _exec_properties(input_base: str, pattern: str, settings: IngestSettings | None = None) -> dict:
    props = {
        standard_component_specs.INPUT_BASE_KEY: input_base,
        standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(
            example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="single_split", pattern=pattern)])),
        standard_component_specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(example_gen_pb2.Output(
            split_config=example_gen_pb2.SplitConfig(splits=[
                example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=3),
                example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)]))),
        standard_component_specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
        standard_component_specs.OUTPUT_FILE_FORMAT_KEY: example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    }
    if settings is not None:
        props[standard_component_specs.CUSTOM_CONFIG_KEY] = proto_utils.proto_to_json(executor.custom_config(settings))
    return props


def _run(executor_class, out_dir: str, props: dict):
    examples = standard_artifacts.Examples()
    examples.uri = out_dir
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=[], tmp_dir=out_dir + ".tmp",
                                                          unique_id="1")
    executor_class(context).Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, dict(props))
    return examples


def _content(examples) -> dict:
    """Split name -> sorted deterministic serializations of its examples."""
    out = {}
    for split in artifact_utils.decode_split_names(examples.split_names):
        files = sorted(glob.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*")))
        records = [tf.train.Example.FromString(r.numpy()).SerializeToString(deterministic=True)
                   for r in tf.data.TFRecordDataset(files, compression_type="GZIP")]
        out[split] = sorted(records)
    return out


def _properties(examples) -> dict:
    return {"split_names": examples.split_names,
            "custom": {k: examples.get_custom_property(k) for k in examples.mlmd_artifact.custom_properties}}


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few rows, on worker processes: chunks that see different column types."""
    monkeypatch.setattr(fast_csv, "CHUNK_BYTES", 64)
    monkeypatch.setattr(fast_csv, "IN_PROCESS_BYTES", 0)


def _both(tmp_path, input_base: str, pattern: str):
    stock = _run(tfx_csv_executor.Executor, str(tmp_path / "stock"), _exec_properties(input_base, pattern))
    ours = _run(executor.Executor, str(tmp_path / "ours"),
                _exec_properties(input_base, pattern, IngestSettings(engine="fast", workers=2)))
    return stock, ours


def test_edge_cases_give_the_examples_splits_and_properties_of_tfx(tmp_path, small_chunks, caplog):
    # Two files in the span (their rows together are the split), chunked into a few rows each:
    # `mixed` is INT in the first file's chunks and FLOAT only in the second's.
    rows = ROWS
    _write(str(tmp_path / "in" / "span-1"), "a.csv", HEADER + "".join(rows[:5]))
    _write(str(tmp_path / "in" / "span-1"), "b.csv", HEADER + "".join(rows[5:]).rstrip("\n"))
    with caplog.at_level("INFO", logger=fast_csv.__name__):
        stock, ours = _both(tmp_path, str(tmp_path / "in"), "span-1/*.csv")
    assert "other column types than the split's" in caplog.text  # those chunks were encoded again
    assert len(os.listdir(artifact_utils.get_split_uri([ours], "train"))) >= 4  # one shard per chunk
    assert _properties(ours) == _properties(stock)
    expected = _content(stock)
    assert sum(len(v) for v in expected.values()) == 8 and all(expected.values())
    assert _content(ours) == expected
    parsed = [tf.train.Example.FromString(r) for split in expected.values() for r in split]
    by_id = {e.features.feature["id"].int64_list.value[0]: e.features.feature for e in parsed}
    assert by_id[2]["note"].bytes_list.value == ["line\nbreak".encode()]  # a newline inside quotes
    assert by_id[3]["big"].bytes_list.value == [b"99999999999999999999"]  # beyond int64: a string column
    assert by_id[6]["mixed"].float_list.value == [6.5]  # promoted by the second file
    assert by_id[1]["empty"] == tf.train.Feature()  # a column with no value at all


def test_quote_free_files_parsed_by_arrow_give_the_same_examples(tmp_path):
    """No quote: Arrow parses the chunks. CRLF and blank lines (CRLF ones too), cells with
    spaces and unicode, a repeated column name whose columns differ in type."""
    header = "id,x,name,x\r\n"
    rows = "1,1, a ,2\r\n\r\n2,2.5,é,3\r\n\n3,,中文,4.5\r\n4,-7,  ,\r\n"
    _write(str(tmp_path / "in" / "span-1"), "a.csv", header + rows)
    stock, ours = _both(tmp_path, str(tmp_path / "in"), "span-1/*.csv")
    assert _properties(ours) == _properties(stock)
    content = _content(ours)
    assert content == _content(stock) and sum(len(v) for v in content.values()) == 4
    # The last `x` column's cells, in the type of both `x` columns (FLOAT: 2.5 and 4.5).
    values = sorted(list(tf.train.Example.FromString(r).features.feature["x"].float_list.value)
                    for v in content.values() for r in v)
    assert values == [[], [2.0], [3.0], [4.5]]


def test_the_embedded_taxi_spans_give_the_same_examples(tmp_path):
    stock, ours = _both(tmp_path, os.path.join(REPO, "data", "taxi"), "span-2016*/*.csv")
    assert _properties(ours) == _properties(stock)
    content = _content(ours)
    assert content == _content(stock)
    assert 800 < sum(len(v) for v in content.values())
    assert 0.65 < len(content["train"]) / sum(len(v) for v in content.values()) < 0.85


def test_columns_not_ingested_are_left_out_alike_by_both_engines(tmp_path, small_chunks):
    """`ingest: drop`: the fast engine and the Beam engine write exactly the examples (and
    splits) TFX writes from the same files without those columns; the values are nowhere."""
    secret = "planted.4711@example.org"
    header, rows = "id,email,price,tract\n", [f'{i},"{secret}, {i}",{i * 1.5},{17031000000 + i}\n' for i in range(12)]
    _write(str(tmp_path / "in" / "span-1"), "a.csv", header + "".join(rows))
    _write(str(tmp_path / "bare" / "span-1"), "a.csv",
           "id,price\n" + "".join(f"{i},{i * 1.5}\n" for i in range(12)))
    expected = _content(_run(tfx_csv_executor.Executor, str(tmp_path / "stock"),
                             _exec_properties(str(tmp_path / "bare"), "span-1/*.csv")))
    assert sum(len(v) for v in expected.values()) == 12
    for engine in ("fast", "beam"):
        props = _exec_properties(str(tmp_path / "in"), "span-1/*.csv", IngestSettings(engine=engine, workers=2))
        props[standard_component_specs.CUSTOM_CONFIG_KEY] = proto_utils.proto_to_json(
            executor.custom_config(IngestSettings(engine=engine, workers=2), ["tract", "email", "not_a_column"]))
        ours = _run(executor.Executor, str(tmp_path / engine), props)
        assert _content(ours) == expected, engine
        for folder, _, names in os.walk(ours.uri):
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    assert secret.encode() not in gzip.decompress(f.read()), (engine, name)
    assert executor.not_ingested_from(props) == ["email", "not_a_column", "tract"]
    assert executor.settings_from(props) == IngestSettings(engine="beam", workers=2)


def test_chunk_boundaries_respect_quoted_newlines(tmp_path):
    """A chunk never starts inside a quoted cell: records are cut where the quotes balance."""
    text = HEADER + "".join(f'{i},1.0,1,"a\n,b\n{i}",n,,1,1\n' for i in range(200))
    _write(str(tmp_path), "q.csv", text)
    names, chunks = fast_csv.plan([str(tmp_path / "q.csv")], chunk_bytes=100)
    assert names == HEADER.strip().split(",") and len(chunks) > 10
    with open(tmp_path / "q.csv", "rb") as f:
        data = f.read()
    for chunk in chunks:
        assert data[chunk.start:chunk.end].count(b'"') % 2 == 0
        cells = csv_encoding.parse_chunk(data[chunk.start:chunk.end], len(names), "q.csv", 0)
        assert all(len(c) == len(cells[0]) for c in cells)
    assert chunks[-1].end == len(data) and sum(c.end - c.start for c in chunks) == len(data) - len(HEADER)


@pytest.mark.parametrize("body, needle", [
    ("1,2,3,x,y,,1\n", "line 3 has 7 cells where the header has 8 columns"),
    ('1,2,3,"x,y,,1,2\n', "unbalanced quotes"),
    ("1,2,3,x,y\rz,,1,2\n", "line 3"),
])
def test_bad_rows_are_refused_naming_file_and_line(tmp_path, body, needle):
    _write(str(tmp_path / "in" / "span-1"), "bad.csv", HEADER + "9,1.0,1,ok,ok,,1,2\n" + body)
    with pytest.raises(csv_encoding.CsvInputError, match=needle) as refused:
        _run(executor.Executor, str(tmp_path / "ours"),
             _exec_properties(str(tmp_path / "in"), "span-1/*.csv", IngestSettings(engine="fast")))
    assert "bad.csv" in str(refused.value)
    with pytest.raises(Exception):  # noqa: B017 - TFX refuses it too, with its own error
        _run(tfx_csv_executor.Executor, str(tmp_path / "stock"), _exec_properties(str(tmp_path / "in"), "span-1/*.csv"))


def test_invalid_utf8_is_refused_naming_the_line(tmp_path):
    os.makedirs(tmp_path / "in" / "span-1")
    (tmp_path / "in" / "span-1" / "bad.csv").write_bytes(
        HEADER.encode() + b"1,2,3,ok,ok,,1,2\n" * 3 + b"1,2,3,\xff\xfe,ok,,1,2\n")
    with pytest.raises(csv_encoding.CsvInputError, match=r"bad.csv: line 5 is not valid UTF-8"):
        _run(executor.Executor, str(tmp_path / "ours"),
             _exec_properties(str(tmp_path / "in"), "span-1/*.csv", IngestSettings(engine="fast")))


def test_files_with_different_headers_are_refused(tmp_path):
    _write(str(tmp_path / "in" / "span-1"), "a.csv", HEADER + "1,2,3,x,y,,1,2\n")
    _write(str(tmp_path / "in" / "span-1"), "b.csv", HEADER.replace("price", "cost") + "1,2,3,x,y,,1,2\n")
    with pytest.raises(csv_encoding.CsvInputError, match="header differs"):
        _run(executor.Executor, str(tmp_path / "ours"),
             _exec_properties(str(tmp_path / "in"), "span-1/*.csv", IngestSettings(engine="fast")))


def test_value_types_follow_tfx_bsl_on_every_kind_of_cell():
    from tfx_bsl.coders import csv_decoder

    cells = [b"", b"0", b"-0", b"+7", b" 12 ", b"1_000", b"9223372036854775807", b"9223372036854775808",
             b"-9223372036854775809", b"1.5", b".5", b"5.", b"1e5", b"1E-3", b"nan", b"NaN", b"inf", b"-Infinity",
             b"1_0.5", b"0x10", b"1,5", b"abc", b" ", "٣".encode(), b"1e", b"--1", b"\t3\n"]
    for cell in cells:
        assert csv_encoding.infer_value_type(cell) == int(csv_decoder._InferValueType(cell)), cell


def test_settings_are_checked():
    assert IngestSettings.from_dict({"engine": "fast", "workers": 2}).workers == 2
    for bad, needle in (({"engine": "spark"}, "engine"), ({"workers": -1}, "workers"),
                        ({"compression_level": 0}, "compression_level"), ({"speed": 1}, "unknown")):
        with pytest.raises(ValueError, match=needle):
            IngestSettings.from_dict(bad)
    roundtrip = executor.settings_from(_exec_properties("x", "y", IngestSettings(engine="beam", workers=3)))
    assert roundtrip == IngestSettings(engine="beam", workers=3)
    assert json.dumps(roundtrip.to_dict())
    assert collections.Counter(IngestSettings().to_dict()) == collections.Counter(
        {"engine": "auto", "workers": 0, "compression_level": 1})
