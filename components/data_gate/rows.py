"""A span's rows as the row-level checks see them: its tf.Examples, a batch at a time, as Arrow.

The gate and calibration read the same thing the same way: the span's tf.Examples (the
ExampleGen output the gate judges; for calibration, the examples CsvExampleGen's engine
writes from the span's files), decoded by tfx_bsl with the curated schema, 8,192 rows at a
time, in bounded memory. One scan feeds every row-level check:
- domains (`domains.Tally` per feature, or `domains.FeatureTally` when calibrating);
- span consistency (`consistency.Tally`);
- the label (`label.Tally`, the pipeline's own label function).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import tempfile
from collections.abc import Iterator, Mapping

import numpy as np

from components.data_gate import consistency as consistency_lib
from components.data_gate import domains as domains_lib
from components.data_gate import label as label_lib
from components.data_gate import measures

BATCH = 8192
# tf_metadata's FeatureType -> the domains' kind.
_KINDS = {1: "bytes", 2: "int", 3: "float"}  # BYTES, INT, FLOAT


def split_files(examples_uri: str, splits: list[str]) -> list[str]:
    """The gzipped TFRecord files of an Examples artifact's splits."""
    out = []
    for split in splits:
        out += sorted(glob.glob(os.path.join(examples_uri, f"Split-{split}", "*")))
    return out


def record_dataset(files: list[str], batch: int = BATCH):
    """The serialized records of gzipped TFRecord files, `batch` at a time (string tensors),
    in file order; files are read (and gunzipped) several at a time."""
    import tensorflow as tf

    records = tf.data.Dataset.from_tensor_slices(files).interleave(
        lambda f: tf.data.TFRecordDataset(f, compression_type="GZIP"), cycle_length=max(1, min(len(files), 4)),
        block_length=batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return records.batch(batch)


def record_batches(files: list[str], batch: int = BATCH) -> Iterator:
    """`record_dataset`'s batches, one at a time."""
    if files:
        yield from record_dataset(files, batch).prefetch(2)


def feature_kinds(schema) -> dict[str, str]:
    return {f.name: _KINDS.get(f.type, "bytes") for f in schema.feature}


# tf_metadata's FeatureType -> what tf.io.parse_example parses it as.
_DTYPES = {"bytes": "string", "int": "int64", "float": "float32"}


@dataclasses.dataclass
class Column:
    """One feature over a batch of rows: every value, and the row each value belongs to."""

    values: np.ndarray
    rows: np.ndarray
    num_rows: int

    def first(self) -> tuple[np.ndarray, np.ndarray]:
        """Each row's first value (a fill where it has none) and whether it has one."""
        present = np.zeros(self.num_rows, bool)
        out = np.empty(self.num_rows, dtype=self.values.dtype)
        out[:] = b"" if self.values.dtype == object else 0
        rows, first = np.unique(self.rows, return_index=True)
        present[rows] = True
        out[rows] = self.values[first]
        return out, present


def _parsed(sparse, num_rows: int) -> Column:
    values = sparse.values.numpy()
    return Column(values.astype(object) if values.dtype.kind in "SO" else values, sparse.indices.numpy()[:, 0], num_rows)


class SpanScan:
    """Runs the row-level tallies over one span's records.

    The records are parsed by TensorFlow's example parser (about 3 us an example for taxi's
    18 features, against 16-20 for tfx_bsl's Arrow decoder), each feature as its schema type;
    a feature whose values are of another type (ExampleValidator reports it) is set aside
    for the span (`mistyped`).

    Args:
      schema: the curated Schema proto (None: statistics only).
      domains: feature -> domains.Domain to count values outside of (the gate), or None.
      learn: keep calibration's per-feature tallies (value counts, extremes) too.
      consistency: the pipeline's span consistency and the span's number, or None.
      label: (label_fn dotted path, kind) or None.
      statistics_seed: also compute TFDV statistics of the span and of two random halves of
        its rows (calibration's sampling noise), halved with this seed; None: none.
    """

    def __init__(self, schema, domains: Mapping[str, domains_lib.Domain] | None = None, learn: bool = False,
                 consistency: tuple[consistency_lib.SpanConsistency, int] | None = None,
                 label: tuple[str, str] | None = None, statistics_seed: int | None = None):
        self._args = (schema, domains, learn, consistency, label, statistics_seed)
        self.kinds = feature_kinds(schema) if schema is not None else {}
        self.mistyped: dict[str, str] = {}
        self.rows = 0
        self.domains = {name: domains_lib.Tally(d) for name, d in (domains or {}).items() if name in self.kinds}
        self.learned = {name: domains_lib.FeatureTally(kind) for name, kind in self.kinds.items()} if learn else {}
        self.consistency = None
        if consistency and consistency[0].enabled:
            self.consistency = consistency_lib.Tally(*consistency)
        self.label = label_lib.Tally(label[0], schema, label[1]) if label else None
        needed = set(self.domains) | set(self.learned) | set(self.consistency.settings.features if self.consistency else ())
        self._spec = None
        if needed:
            import tensorflow as tf

            self._spec = {name: tf.io.VarLenFeature(getattr(tf, _DTYPES[self.kinds[name]]))
                          for name in sorted(needed) if name in self.kinds}
        self.statistics = None
        if statistics_seed is not None:
            from tfx_bsl.coders import example_coder

            # Decoded without the schema, as StatisticsGen decodes the examples it profiles.
            self._decoder = example_coder.ExamplesToRecordBatchDecoder()
            self.statistics = [measures.StatsTally() for _ in range(3)]  # the span, half A, half B
            self.rng = np.random.default_rng(statistics_seed)

    def _parse(self, records: list[bytes]) -> dict[str, Column]:
        """Every needed feature of the batch; one that does not parse as its schema type is
        set aside (for the rest of the span) with the parser's message."""
        import tensorflow as tf

        try:
            parsed = tf.io.parse_example(records, self._spec)
        except tf.errors.InvalidArgumentError:
            parsed = {}
            for name, spec in list(self._spec.items()):
                try:
                    parsed.update(tf.io.parse_example(records, {name: spec}))
                except tf.errors.InvalidArgumentError as e:
                    self.mistyped[name] = (f"its values are not {self.kinds[name]} as the schema says"
                                           f" ({e.message.splitlines()[0][:200]})")
                    del self._spec[name]
        return {name: _parsed(sparse, len(records)) for name, sparse in parsed.items()}

    def add(self, records) -> None:
        """One batch of serialized tf.Examples (a list of bytes or a string tensor)."""
        if not len(records):
            return
        columns = self._parse(records) if self._spec else {}
        self._statistics(records)
        self._tally(columns, len(records))
        if self.label is not None:
            self.label.add(records)

    def _statistics(self, records) -> None:
        if self.statistics is None:
            return
        batch = self._decoder.DecodeBatch(records if isinstance(records, list) else records.numpy().tolist())
        half = self.rng.random(batch.num_rows) < 0.5
        full, a, b = self.statistics
        full.add(batch)
        a.add(batch.filter(half))
        b.add(batch.filter(~half))

    def _tally(self, columns: dict[str, Column], num_rows: int) -> None:
        self.rows += num_rows
        for name, tally in [*self.domains.items(), *self.learned.items()]:
            if name in columns:
                tally.add(columns[name].values)
        if self.consistency is not None:
            empty = (np.zeros(num_rows), np.zeros(num_rows, bool))
            self.consistency.add({name: columns[name].first() if name in columns else empty
                                  for name in self.consistency.settings.features})

    def scan(self, files: list[str]) -> SpanScan:
        """Every record of the files. The first batch is taken alone (it finds the features of
        another type and the label's sources); the rest are parsed on every core by tf.data,
        in order. Should a later batch hold a type the first did not, the span is scanned
        again a batch at a time."""
        import tensorflow as tf

        if not files:
            return self
        batches = record_dataset(files)
        for first in batches.take(1):
            self.add(first)
        spec = dict(self._spec or {})
        label_spec = self.label.source_spec if self.label is not None else None

        def parse(records):
            return (tf.shape(records)[0], records if self.statistics is not None else tf.constant([], tf.string),
                    tf.io.parse_example(records, spec) if spec else {},
                    tf.io.parse_example(records, label_spec) if label_spec else {})

        rest = batches.skip(1).map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(2)
        try:
            for count, records, parsed, label_parsed in rest:
                num_rows = int(count)
                self._statistics(records)
                self._tally({name: _parsed(sparse, num_rows) for name, sparse in parsed.items()}, num_rows)
                if label_spec:
                    self.label.add_parsed(label_parsed, num_rows)
        except tf.errors.InvalidArgumentError:
            again = SpanScan(*self._args)
            for records in record_batches(files):
                again.add(records)
            self.__dict__.update(again.__dict__)
        return self


def span_examples(folder: str, example_format: str, out_dir: str) -> list[str]:
    """The files of a span's tf.Examples: CSV and Parquet are encoded by the fast engines of
    CsvExampleGen and ParquetExampleGen (the same examples the pipeline ingests) into
    `out_dir`; TFRecord spans are read as they are."""
    if example_format == "parquet":
        from parquet_engine import fast_parquet

        fast_parquet.ingest(sorted(glob.glob(os.path.join(folder, "*.parquet"))), [out_dir], [1], workers=0)
        return sorted(glob.glob(os.path.join(out_dir, "*")))
    if example_format != "csv":
        return sorted(glob.glob(os.path.join(folder, "*.tfrecord.gz")))
    from csv_engine import fast_csv

    paths = sorted(glob.glob(os.path.join(folder, "*.csv")))
    fast_csv.ingest(paths, [out_dir], [1], workers=0)
    return sorted(glob.glob(os.path.join(out_dir, "*")))


def scan_span(folder: str, example_format: str, schema, **scan_args) -> SpanScan:
    """A SpanScan over a span folder's rows (calibration's way in)."""
    with tempfile.TemporaryDirectory() as tmp:
        return SpanScan(schema, **scan_args).scan(span_examples(folder, example_format, tmp))
