"""`retrain new`: a pipeline that runs on a folder of spans before anyone writes model code.

`plan()` reads the spans and checks everything first (name, targets, data, label, task),
writing nothing; `write()` then writes the curated schema, the pipeline package
(`features.py`, `preprocessing.py`, `model.py`, `hparams.py`, `config.yaml`) and the DAG
file from `runner/scaffold_templates/`, and calibrates the data gate on the spans' own history.
If a step fails, what it wrote is removed and anything it replaced (`--force`) is put back.

How columns become features (the choices are written into features.py, to edit):
- strings: a vocabulary (top 1,000, 10 OOV buckets);
- non-negative integer codes with at most MAX_CODES distinct values below MAX_CODES: one-hot;
- other numbers: z-scored, or quantile-bucketized when |skewness| > SKEW_LIMIT;
- a column with one value (or none) in every span is left out, and said so.
"""

from __future__ import annotations

import dataclasses
import keyword
import math
import os
import pprint
import re
import shutil
import string
from collections.abc import Callable

from core import files, spans, tasks
from core.errors import BadInput
from pipelines.config import PipelineConfig
from runner import preflight

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scaffold_templates")
NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
SKEW_LIMIT = 2.0
MAX_CODES = 32
MAX_CLASSES = 100
# Without --task: a label with at most this many distinct integers is a class label.
AUTO_CLASSES = 20
WINDOW = 6
EPOCHS = 20
# A training split smaller than this gets a smaller network and fewer passes: on few rows
# the default [64, 32] over 20 passes learns the noise, and the paired simple-baseline gate
# rightly refuses it (diabetes, 331 training rows, 6 seeded splits: MSE 3910 for [64, 32] x 20
# passes, 3127 for [32] x 10 passes, 3067 for the linear model).
SMALL_TRAIN_ROWS = 1000
# The eval split's share of rows: 1 of ExampleGen's 4 hash buckets (pipelines/factory.py: 3 train, 1 eval).
EVAL_SHARE = 0.25
# The Evaluator judges no candidate on fewer eval examples than min_eval_examples (this by default).
DEFAULT_MIN_EVAL = PipelineConfig.__dataclass_fields__["min_eval_examples"].default
# The lowest min_eval_examples a generated config sets.
MIN_EVAL_FLOOR = 10


class NewPipelineError(BadInput):
    """`retrain new` cannot proceed; names the input at fault (nothing was written)."""


@dataclasses.dataclass
class Plan:
    """What `write` generates, decided from the data."""

    name: str
    root: str
    data_root: str
    example_format: str
    span_numbers: list[int]
    rows: int
    label: str
    label_type: str  # the schema's type: INT, FLOAT, BYTES
    task: str
    task_reason: str
    numeric: list[str]
    bucket: list[str]
    categorical: dict[str, int]
    vocab: list[str]
    left_out: dict[str, str]
    slices: list[str]
    # The fairness block's groups (components/evaluator/fairness.py): low-cardinality categorical columns.
    groups: list[str] = dataclasses.field(default_factory=list)
    classes: list = dataclasses.field(default_factory=list)
    label_mean: float = 0.0
    label_std: float = 1.0
    thresholds: dict = dataclasses.field(default_factory=dict)
    schema_text: str = ""
    # The event time and the fields derived from it, when the data has one (the config's block).
    span_consistency: dict | None = None
    # Columns that look like personal data or identifiers: column -> (pii class, why).
    identifiers: dict = dataclasses.field(default_factory=dict)

    @property
    def targets(self) -> dict[str, str]:
        return targets(self.root, self.name)

    @property
    def window(self) -> int:
        return min(WINDOW, len(self.span_numbers))

    @property
    def eval_size(self) -> EvalSize:
        """How many eval examples a run over a full window should hold, and what that means
        for `min_eval_examples` (the Evaluator does not judge below it)."""
        window_rows = self.rows * self.window / len(self.span_numbers)
        expected = int(window_rows * EVAL_SHARE)
        # ExampleGen's hash split is a coin per row: the count varies by about this much.
        low = max(0, int(expected - 3 * math.sqrt(window_rows * EVAL_SHARE * (1 - EVAL_SHARE))))
        if low >= DEFAULT_MIN_EVAL:
            return EvalSize(expected, low, None, window_rows)
        return EvalSize(expected, low, max(MIN_EVAL_FLOOR, int(low * 0.8)), window_rows)


@dataclasses.dataclass(frozen=True)
class EvalSize:
    """A new pipeline's expected eval split: `expected` examples, rarely fewer than `low`
    (3 sigma of the hash split); `min_eval` is the min_eval_examples the config sets (None:
    the default suits)."""

    expected: int
    low: int
    min_eval: int | None
    window_rows: float

    def advice(self) -> str | None:
        """What `retrain new` says about the eval split when the default would not suit, else None."""
        if self.min_eval is None:
            return None
        needed = math.ceil(DEFAULT_MIN_EVAL / EVAL_SHARE * 1.3)
        text = (f"eval split: about {self.expected} examples per run (1 in {round(1 / EVAL_SHARE)} of the window's "
                f"~{int(self.window_rows)} rows; as few as {self.low} by the split's chance), fewer than "
                f"min_eval_examples' default {DEFAULT_MIN_EVAL}, which would leave the first run unjudged. ")
        if self.low < MIN_EVAL_FLOOR:
            return text + (f"Even min_eval_examples {MIN_EVAL_FLOOR} may not be reached: give the window at least "
                           f"{needed} rows (more rows per month, or more months) before trusting the gate.")
        return text + (f"The config sets min_eval_examples: {self.min_eval}; a candidate judged on so few examples "
                       f"gets wide intervals. For the default, give the window about {needed} rows (more rows per "
                       "month, or more months), then remove that line.")


def targets(root: str, name: str) -> dict[str, str]:
    """What `retrain new NAME` writes, by role."""
    return {
        "pipeline": os.path.join(root, "pipelines", name),
        "schemas": os.path.join(root, "schemas", name),
        "dag": os.path.join(root, "dags", f"{name}_retraining.py"),
        "template": os.path.join(root, "dags", "compiled", f"{name}.json"),
    }


def _example_format(data_root: str, span_numbers: list[int]) -> str:
    found = set()
    for span in span_numbers:
        names = os.listdir(spans.span_dir(data_root, span))
        found |= {fmt for fmt, suffix in spans.FILE_SUFFIXES.items() if any(n.endswith(suffix) for n in names)}
    if len(found) != 1:
        held = " and ".join(sorted(spans.FILE_SUFFIXES[f] for f in found)) + " files" if found else "no data files"
        raise NewPipelineError(
            f"{data_root}: the spans hold {held}; retrain new needs one format (span-YYYYMM/*.csv,"
            " span-YYYYMM/*.parquet or span-YYYYMM/*.tfrecord.gz)")
    return found.pop()


def _read_frame(data_root: str, span_numbers: list[int], example_format: str):
    """All rows of the spans as a DataFrame of strings and numbers (None where blank), and
    each row's span (a Series)."""
    import pandas as pd

    frames, row_spans = [], []
    for span in span_numbers:
        folder = spans.span_dir(data_root, span)
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if example_format == "csv" and name.endswith(".csv"):
                spans.check_span_csv(folder)
                frames.append(pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""]))
            elif example_format == "tfrecord" and name.endswith(".tfrecord.gz"):
                frames.append(pd.DataFrame(_tfrecord_rows(path)))
            elif example_format == "parquet" and name.endswith(".parquet"):
                frames.append(pd.DataFrame(_parquet_rows(path)))
            else:
                continue
            row_spans += [span] * len(frames[-1])
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return frame, pd.Series(row_spans, dtype="int64")


# A column is the event time when this share of its values (as a unit below) fall in their
# own span's month (a day's tolerance); a column derives from it when this share agree.
EVENT_TIME_SHARE = 0.99
DERIVED_SHARE = 0.99


def _in_own_month(times, row_spans) -> float:
    """The share of valid times that fall in their row's span (a day's tolerance either side)."""
    import numpy as np
    import pandas as pd

    valid = ~np.asarray(times.isna())
    if not valid.any():
        return 0.0
    day = pd.Timedelta(days=1)
    ok = [np.asarray(t.year, np.float64) * 100 + np.asarray(t.month, np.float64) == row_spans
          for t in (times, times + day, times - day)]
    return float(np.mean(np.logical_or.reduce(ok)[valid]))


def propose_span_consistency(frame, row_spans, label: str) -> dict | None:
    """The `span_consistency:` block a config should declare, found in the data, or None.

    A column is the event time when EVENT_TIME_SHARE of its values, read as Unix seconds,
    milliseconds, microseconds or nanoseconds, or as ISO 8601 text, fall in their own span's
    month (in UTC, which is assumed; say otherwise in the config). Integer columns whose
    values agree with a kind of `consistency.DERIVED_KINDS` computed from it in DERIVED_SHARE
    of the rows are declared derived from it.
    """
    import numpy as np
    import pandas as pd

    from components.data_gate import consistency

    spans_array = row_spans.to_numpy(np.float64)
    best = None
    for column in frame.columns:
        if column == label:
            continue
        values = frame[column]
        present = values.notna().to_numpy()
        if present.mean() < EVENT_TIME_SHARE:
            continue
        numbers = pd.to_numeric(values, errors="coerce")
        units = list(consistency.NUMERIC_UNITS) if numbers.notna()[present].all() else [consistency.ISO]
        for unit in units:
            event = consistency.EventTime(feature=column, unit=unit)
            raw = numbers.to_numpy(np.float64) if unit != consistency.ISO else values.astype(str).to_numpy()
            try:
                times = consistency.event_times(raw[present], event)
            except (ValueError, OverflowError):
                continue
            share = _in_own_month(times, spans_array[present])
            if share >= EVENT_TIME_SHARE and (best is None or share > best[0]):
                best = (share, event, times, present)
    if best is None:
        return None
    _, event, times, present = best
    derived = {}
    for column in frame.columns:
        if column in (label, event.feature):
            continue
        numbers = pd.to_numeric(frame[column], errors="coerce").to_numpy(np.float64)[present]
        if np.isnan(numbers).mean() > 1 - DERIVED_SHARE or not np.all(np.isnan(numbers) | (numbers == np.round(numbers))):
            continue
        for kind in consistency.DERIVED_KINDS:
            if np.mean(consistency.derive(times, kind) == numbers) >= DERIVED_SHARE:
                derived[column] = kind
                break
    return {"event_time": {"feature": event.feature, "unit": event.unit, "timezone": event.timezone},
            "tolerance_hours": 1, "derived": derived}


def _tfrecord_rows(path: str) -> list[dict]:
    import tensorflow as tf

    rows = []
    for record in tf.data.TFRecordDataset(path, compression_type="GZIP"):
        example = tf.train.Example.FromString(record.numpy())
        row = {}
        for key, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            values = list(getattr(feature, kind).value) if kind else []
            if len(values) > 1:
                raise NewPipelineError(f"{path}: feature {key!r} has {len(values)} values in one example; retrain new"
                                       " handles one value per column (write the model code by hand, as pipelines/digits does)")
            if values and kind == "bytes_list":
                try:
                    values = [values[0].decode("utf-8")]
                except UnicodeDecodeError:
                    raise NewPipelineError(
                        f"{path}: feature {key!r} holds binary bytes (an image?), not text; retrain new handles"
                        " numbers and strings (write the model code by hand, as pipelines/digits does)") from None
            row[key] = values[0] if values else None
        rows.append(row)
    return rows


def _parquet_rows(path: str) -> dict[str, list]:
    """A Parquet file's columns as ingestion reads them (core/parquet_columns.py): numbers and
    text, None where there is no value.

    Raises:
      NewPipelineError: a column ingestion refuses, a list column (retrain new handles one
        value per column) or binary bytes that are not text.
    """
    from core import parquet_columns

    try:
        parquet_file = parquet_columns.open_file(path)
        found = parquet_columns.file_columns(path, parquet_file)
        columns = [c.checked(path) for c in found.columns]
        lists = [c.name for c in columns if c.is_list]
        if lists:
            raise NewPipelineError(f"{path}: column(s) {', '.join(lists)} hold lists; retrain new handles one value per"
                                   " column (write the model code by hand, as pipelines/digits does)")
        table = parquet_file.read(columns=found.names)
        out = {}
        for column in columns:
            values = parquet_columns.row_values(table.column(column.name), column, path)
            if column.kind == parquet_columns.BYTES:
                try:
                    out[column.name] = [v[0].decode("utf-8") if v else None for v in values]
                except UnicodeDecodeError:
                    raise NewPipelineError(
                        f"{path}: column {column.name!r} holds binary bytes (an image?), not text; retrain new handles"
                        " numbers and strings (write the model code by hand, as pipelines/digits does)") from None
            else:
                out[column.name] = [v[0] if v else None for v in values]
        return out
    except parquet_columns.ParquetInputError as e:
        raise NewPipelineError(str(e)) from e


def _schema_types(schema_text: str) -> dict[str, str]:
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = text_format.Parse(schema_text, schema_pb2.Schema())
    return {f.name: schema_pb2.FeatureType.Name(f.type) for f in schema.feature}


def _numbers(column):
    import pandas as pd

    return pd.to_numeric(column.dropna(), errors="coerce").dropna()


def _choose_task(label: str, values, label_type: str, asked: str | None) -> tuple[str, str]:
    """The task (asked, or from the label's values) and why; raises on a label that cannot be it."""
    distinct = values.nunique()
    if distinct < 2:
        one = values.iloc[0] if len(values) else "nothing"
        raise NewPipelineError(f"label {label!r} has one value ({one!r}) in every span: there is nothing to learn")
    numeric = label_type in ("INT", "FLOAT")
    if asked == tasks.REGRESSION and not numeric:
        sample = ", ".join(repr(v) for v in values.drop_duplicates().head(3))
        raise NewPipelineError(f"label {label!r} is not numeric (values like {sample}): a regression label must be a number")
    if asked == tasks.BINARY and distinct != 2:
        raise NewPipelineError(f"label {label!r} has {distinct} values, a binary label needs exactly 2"
                               f" (use --task {tasks.MULTICLASS if distinct <= MAX_CLASSES else tasks.REGRESSION})")
    if asked in (tasks.BINARY, tasks.MULTICLASS) and label_type == "FLOAT":
        raise NewPipelineError(f"label {label!r} holds fractional numbers: a class label must be text or whole numbers")
    if asked == tasks.MULTICLASS and distinct > MAX_CLASSES:
        raise NewPipelineError(f"label {label!r} has {distinct} values, more than the {MAX_CLASSES} classes a"
                               " generated classifier handles")
    if asked:
        return asked, "as asked (--task)"
    if distinct == 2:
        return tasks.BINARY, "the label has two values"
    if not numeric:
        if distinct > MAX_CLASSES:
            raise NewPipelineError(f"label {label!r} is text with {distinct} values: too many classes; pass --task")
        return tasks.MULTICLASS, f"the label is text with {distinct} values"
    if label_type == "INT" and distinct <= AUTO_CLASSES:
        return tasks.MULTICLASS, f"the label has {distinct} whole-number values (pass --task regression to predict it as a number)"
    return tasks.REGRESSION, f"the label is a number with {distinct} values"


def _skewness(x) -> float:
    std = float(x.std(ddof=0))
    return 0.0 if std == 0 else float(((x - x.mean()) ** 3).mean() / std**3)


# Column names that say what they hold (tokens of the name, split at _ - . and case):
# personal data, and identifiers of a person, an account or a device.
_PERSONAL_TOKENS = {"email", "mail", "phone", "mobile", "tel", "name", "firstname", "lastname", "surname", "fullname",
                    "ssn", "passport", "address", "street", "zip", "zipcode", "postcode", "postal", "dob", "birth",
                    "birthdate", "birthday", "iban", "ip"}
_IDENTIFIER_TOKENS = {"id", "ids", "uuid", "guid", "account", "user", "username", "login", "customer", "client",
                      "patient", "member", "device", "imei", "license", "licence", "plate", "vin"}
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", re.I)
_PHONE_RE = re.compile(r"^\+?[\d ()./-]{7,}$")
_IPV4_RE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
# A column this unique across rows (and with at least this many rows) names rows, not a property.
_UNIQUE_SHARE = 0.9
_UNIQUE_MIN_ROWS = 50


def _name_tokens(column: str) -> set[str]:
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", column)
    return {t for t in re.split(r"[^a-zA-Z0-9]+", spaced.lower()) if t}


def identifiers(frame, types: dict[str, str], label: str) -> dict[str, tuple[str, str]]:
    """Columns whose names or values look like personal data or identifiers: column ->
    (pii class, why). `retrain new` forbids them in the model and keeps them out of request
    logs until a person decides otherwise (the feature policy it writes)."""
    out = {}
    for column in frame.columns:
        if column == label:
            continue
        tokens = _name_tokens(column)
        values = frame[column].dropna()
        text = values.astype(str).str.strip()
        sample = text.head(1000)
        if tokens & _PERSONAL_TOKENS:
            out[column] = ("personal", f"its name ({', '.join(sorted(tokens & _PERSONAL_TOKENS))}) says personal data")
        elif tokens & _IDENTIFIER_TOKENS:
            out[column] = ("pseudonymous", f"its name ({', '.join(sorted(tokens & _IDENTIFIER_TOKENS))}) says an"
                                           " identifier")
        elif len(sample) and sample.str.match(_EMAIL_RE).mean() > 0.5:
            out[column] = ("personal", "its values are e-mail addresses")
        elif len(sample) and types.get(column) == "BYTES" and sample.str.match(_IPV4_RE).mean() > 0.5:
            out[column] = ("personal", "its values are IP addresses")
        elif len(sample) and types.get(column) == "BYTES" and sample.str.match(_PHONE_RE).mean() > 0.5:
            out[column] = ("personal", "its values look like phone numbers")
        elif (len(values) >= _UNIQUE_MIN_ROWS and types.get(column) == "BYTES"
              and values.nunique() >= _UNIQUE_SHARE * len(values)):
            out[column] = ("pseudonymous", f"{values.nunique()} distinct values in {len(values)} rows: it names rows")
    return out


def _classify_columns(frame, types: dict[str, str], label: str) -> dict:
    out = {"numeric": [], "bucket": [], "categorical": {}, "vocab": [], "left_out": {}}
    for column in frame.columns:
        if column == label:
            continue
        values = frame[column].dropna()
        kind = types.get(column)
        if values.nunique() < 2:
            out["left_out"][column] = "one value (or none) in every span"
        elif kind == "BYTES":
            out["vocab"].append(column)
        elif kind not in ("INT", "FLOAT"):
            out["left_out"][column] = f"type {kind} is not handled"
        else:
            x = _numbers(values)
            if kind == "INT" and x.min() >= 0 and x.max() < MAX_CODES and x.nunique() <= MAX_CODES:
                out["categorical"][column] = int(x.max()) + 1
            elif abs(_skewness(x)) > SKEW_LIMIT:
                out["bucket"].append(column)
            else:
                out["numeric"].append(column)
    return out


def _floor2(x: float) -> float:
    return math.floor(x * 100) / 100


def _sig4(x: float) -> float:
    """Rounded up to 4 significant digits (a ceiling must not fall below the value)."""
    if x <= 0:
        return x
    scale = 10 ** (math.floor(math.log10(x)) - 3)
    return math.ceil(x / scale) * scale


def _thresholds(task: str, label_values) -> dict:
    if task == tasks.REGRESSION:
        y = _numbers(label_values).astype(float)
        return {
            "max_mse": _sig4(float(((y - y.mean()) ** 2).mean())),
            "max_mae": _sig4(float((y - y.median()).abs().mean())),
            "max_mse_increase": 0.1,
            "max_mae_increase": 0.1,
        }
    majority = float(label_values.value_counts(normalize=True).iloc[0])
    out = {"min_accuracy": _floor2(majority)}
    if task == tasks.BINARY:
        out = {"min_auc": 0.6, **out, "max_auc_decrease": 0.02}
    else:
        out["max_accuracy_decrease"] = 0.02
    return out


def plan(root: str, name: str, data_root: str, label: str, task: str | None = None, force: bool = False,
         progress: Callable[[str], None] = lambda m: None) -> Plan:
    """Checks everything and decides what to generate; writes nothing.

    Raises:
      NewPipelineError: a bad name, existing targets without `force`, no spans, an unknown
        label column or a label that cannot be the task's (exit 2).
    """
    from runner import schema_tools

    if not NAME_RE.match(name or "") or keyword.iskeyword(name):
        raise NewPipelineError(f"pipeline name {name!r}: use lower-case letters, digits and _ (a Python package name)")
    existing = [p for p in targets(root, name).values() if os.path.exists(p)]
    if existing and not force:
        raise NewPipelineError(f"{', '.join(os.path.relpath(p, root) for p in existing)} already exist(s);"
                               " pass --force to replace them")
    if task is not None and task not in tasks.TASKS:
        raise NewPipelineError(f"--task {task!r} is not one of {', '.join(tasks.TASKS)}")
    data_root = os.path.abspath(data_root)
    if not os.path.isdir(data_root):
        raise NewPipelineError(f"--data {data_root}: no such folder")
    span_numbers = spans.list_spans(data_root)
    if not span_numbers:
        raise NewPipelineError(f"--data {data_root}: no span folders (expected span-YYYYMM/*.csv, *.parquet or *.tfrecord.gz)")
    example_format = _example_format(data_root, span_numbers)
    progress(f"reading {len(span_numbers)} span(s) {span_numbers[0]}..{span_numbers[-1]} ({example_format})")
    for span in span_numbers:  # bytes that are not text (or not records) are named, not a traceback
        try:
            preflight.check_span_structure(spans.span_dir(data_root, span), example_format)
        except preflight.InputError as e:
            raise NewPipelineError(str(e)) from e
    frame, row_spans = _read_frame(data_root, span_numbers, example_format)
    if frame.empty:
        raise NewPipelineError(f"--data {data_root}: the spans hold no rows")
    if label not in frame.columns:
        raise NewPipelineError(f"label {label!r} is not a column of the spans (columns: {', '.join(frame.columns)})")
    progress("inferring the schema (TFDV, as the pipeline's ExampleGen decodes the data)")
    schema_text = schema_tools.infer_schema_text(data_root, span_numbers, example_format, label=label)
    types = _schema_types(schema_text)
    label_values = frame[label].dropna()
    chosen, reason = _choose_task(label, label_values, types[label], task)
    ids = identifiers(frame, types, label)
    columns = _classify_columns(frame.drop(columns=list(ids)), types, label)
    for column, (pii, why) in ids.items():
        columns["left_out"][column] = f"{why}: forbidden in schemas/{name}/feature_policy.yaml ({pii})"
    if not (columns["numeric"] or columns["bucket"] or columns["categorical"] or columns["vocab"]):
        raise NewPipelineError(f"no column besides the label {label!r} varies: there are no features to learn from")
    small = [c for c in columns["vocab"] + list(columns["categorical"]) if 2 <= frame[c].nunique() <= 12]
    progress("looking for an event time and the fields derived from it")
    consistency = propose_span_consistency(frame, row_spans, label)
    result = Plan(
        name=name, root=root, data_root=data_root, example_format=example_format, span_numbers=span_numbers,
        rows=len(frame), label=label, label_type=types[label], task=chosen, task_reason=reason,
        numeric=columns["numeric"], bucket=columns["bucket"], categorical=columns["categorical"],
        vocab=columns["vocab"], left_out=columns["left_out"], slices=small[:1],
        groups=small[:3],
        thresholds=_thresholds(chosen, label_values), schema_text=schema_text, span_consistency=consistency,
        identifiers=ids,
    )
    if chosen == tasks.REGRESSION:
        y = _numbers(label_values).astype(float)
        result.label_mean, result.label_std = round(float(y.mean()), 4), round(float(y.std(ddof=0)), 4) or 1.0
    else:
        kinds = {"INT": int, "FLOAT": float}
        result.classes = sorted({kinds.get(types[label], str)(v) for v in label_values})
        if types[label] == "INT":
            result.schema_text = _with_class_domain(schema_text, label, result.classes)
    return result


def _with_class_domain(schema_text: str, label: str, classes: list[int]) -> str:
    """An integer class label gets its classes' range as its domain (TFDV infers none for
    INT), so a span with an unseen class stops at the data gate instead of training on -1."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = text_format.Parse(schema_text, schema_pb2.Schema())
    feature = next(f for f in schema.feature if f.name == label)
    feature.int_domain.min, feature.int_domain.max = min(classes), max(classes)
    return text_format.MessageToString(schema)


def _py(value) -> str:
    return pprint.pformat(value, width=96, sort_dicts=False)


def _render(template: str, **values) -> str:
    with open(os.path.join(TEMPLATES, template), encoding="utf-8") as f:
        return string.Template(f.read()).substitute(**values)


_LABEL_FNS = {
    tasks.REGRESSION: '''
def _label(label):
    """The regression target as float32."""
    return tf.cast(label, tf.float32)
''',
    "classification": '''
def _label(label):
    """The class index of each label value, in the order of `features.LABEL_CLASSES`; -1 for a
    value not in it (the schema's domain of the label makes the data gate stop such a span)."""
    classes = tf.constant(features.LABEL_CLASSES, dtype=label.dtype)
    matches = tf.equal(tf.expand_dims(label, 1), tf.expand_dims(classes, 0))
    index = tf.argmax(tf.cast(matches, tf.int64), axis=1)
    return tf.where(tf.reduce_any(matches, axis=1), index, tf.constant(-1, tf.int64))
''',
}


def _summary(p: Plan) -> str:
    what = {tasks.REGRESSION: f"predicts {p.label} (regression)",
            tasks.BINARY: f"predicts whether {p.label} is {p.classes[-1]!r} (binary classification)" if p.classes else "",
            tasks.MULTICLASS: f"predicts {p.label}, one of {len(p.classes)} classes (multiclass classification)"}[p.task]
    features_count = len(p.numeric) + len(p.bucket) + len(p.categorical) + len(p.vocab)
    return f"{what[0].upper()}{what[1:]} from {features_count} columns of monthly spans."


def render(p: Plan) -> dict[str, str]:
    """Relative path -> content of every generated file (the schema included)."""
    title = p.name.replace("_", " ").capitalize()
    rel_data = os.path.relpath(p.data_root, os.path.join(p.root, "pipelines", p.name))
    summary = _summary(p)
    if p.task == tasks.REGRESSION:
        label_facts = (
            "# The label's scale in the spans at generation: the head predicts (label - LABEL_MEAN) /\n"
            "# LABEL_STD and rescales, so training starts in the label's range. A prior, not refreshed.\n"
            f"LABEL_MEAN = {p.label_mean!r}\nLABEL_STD = {p.label_std!r}\n")
        head = ("# Regression: one number per example, in the label's units (TF Serving's :regress).\n"
                "HEAD = heads.Head(tasks.REGRESSION, label_mean=features.LABEL_MEAN, label_std=features.LABEL_STD)")
        methods = "`regression` signature"
    else:
        which = ("# The two classes, sorted; the second is the positive class (swap them to flip it).\n"
                 if p.task == tasks.BINARY else "# The classes, sorted: the model's output i is LABEL_CLASSES[i].\n")
        label_facts = f"{which}LABEL_CLASSES = {_py(p.classes)}\n"
        const = "BINARY" if p.task == tasks.BINARY else "MULTICLASS"
        head = (f"# {p.task.replace('_', ' ').capitalize()}: class names as TF Serving's :classify returns them.\n"
                f"HEAD = heads.Head(tasks.{const}, classes=tuple(str(c) for c in features.LABEL_CLASSES))")
        methods = "`classification`" + (" and `regression` signatures" if p.task == tasks.BINARY else " signature")
    if p.left_out:
        label_facts += "# Left out: " + "; ".join(f"{k} ({why})" for k, why in p.left_out.items()) + "\n"
    train_rows = int(p.rows * p.window / len(p.span_numbers) * 0.75)  # 3 of ExampleGen's 4 hash buckets
    small = train_rows < SMALL_TRAIN_ROWS
    epochs, hidden_units = (EPOCHS // 2, [32]) if small else (EPOCHS, [64, 32])
    train_steps = max(100, min(1000, math.ceil(epochs * train_rows / 32)))
    size_note = (f"# A small training split (under {SMALL_TRAIN_ROWS} rows): one hidden layer and {epochs} passes,\n"
                 f"# so the network does not learn the noise; widen both as the data grows.\n" if small else "")
    thresholds = "\n".join(f"{k}: {v}" for k, v in p.thresholds.items())
    comment = {
        tasks.REGRESSION: "# Ceilings: the errors of always predicting the mean (MSE) and the median (MAE);\n"
                          "# a rise of more than 10% vs the baseline refuses only when significant.",
        tasks.BINARY: "# Floors: AUC 0.6 and the share of the commoner class (what always guessing it scores).",
        tasks.MULTICLASS: "# Floor: the share of the commonest class (what always guessing it scores).",
    }[p.task]
    thresholds = f"{comment}\n{thresholds}"
    size = p.eval_size
    if size.min_eval is not None:
        thresholds += (f"\n# A window holds about {size.expected} eval examples (as few as {size.low}): fewer than\n"
                       f"# {DEFAULT_MIN_EVAL}, the default of min_eval_examples, below which a candidate is not judged.\n"
                       f"min_eval_examples: {size.min_eval}")
    values = dict(
        name=p.name, title=title, summary=summary, data=os.path.relpath(p.data_root, p.root), spans_text=f"spans {p.span_numbers[0]}..{p.span_numbers[-1]}",
        rows=p.rows, label_key=repr(p.label), label_facts=label_facts, numeric=_py(p.numeric), bucket=_py(p.bucket),
        categorical=_py(p.categorical), vocab=_py(p.vocab), slices=_py(p.slices), groups=_py(p.groups),
        skew_limit=SKEW_LIMIT,
        max_codes=MAX_CODES, head=head, methods=methods, window=p.window,
        label_fn=_LABEL_FNS[tasks.REGRESSION if p.task == tasks.REGRESSION else "classification"],
        data_root=rel_data, example_format=p.example_format, label_xf=re.sub(r"\W", "_", p.label) + "_xf",
        task=p.task, epochs=epochs, train_rows=train_rows, train_steps=train_steps, size_note=size_note,
        hidden_units=_py(hidden_units), hidden_units_tuple=_py(tuple(hidden_units)), thresholds=thresholds,
        gate_policy="", span_consistency=_consistency_block(p.span_consistency),
    )
    package = os.path.join("pipelines", p.name)
    out = {os.path.join(package, f[: -len(".tmpl")]): _render(f, **values)
           for f in ("__init__.py.tmpl", "features.py.tmpl", "preprocessing.py.tmpl", "hparams.py.tmpl",
                     "model.py.tmpl", "config.yaml.tmpl")}
    out[os.path.join("dags", f"{p.name}_retraining.py")] = _render("dag.py.tmpl", **values)
    out[os.path.join("schemas", p.name, "schema.pbtxt")] = _schema_header(p) + p.schema_text
    out[os.path.join("schemas", p.name, "feature_policy.yaml")] = feature_policy_text(p)
    return out


def feature_policy_text(p: Plan) -> str:
    """The generated feature policy (core/feature_policy.py): every column of the schema,
    those that look like personal data or identifiers forbidden in the model, dropped from
    request logs and (from CSV and Parquet) never ingested, the rest allowed and kept; a person reviews it."""
    import yaml

    features = {}
    for column in _schema_types(p.schema_text):
        if column in p.identifiers:
            pii, why = p.identifiers[column]
            features[column] = {"pii": pii, "use_in_model": "forbidden", "log": "drop",
                                # CSV and Parquet are ingested without the column (TFRecords as they are).
                                **({"ingest": "drop"} if p.example_format in ("csv", "parquet") else {}),
                                "reason": f"retrain new: {why}; review before allowing it"}
        else:
            features[column] = {"pii": "none", "use_in_model": "allowed", "log": "keep"}
    header = (f"# The {p.name} pipeline's feature policy, written by `retrain new` (core/feature_policy.py):\n"
              "# per column, its pii class (none, pseudonymous, personal, special), whether a model may use\n"
              "# it and what request logs keep of it (keep, hash under RETRAIN_LOG_HASH_KEY, drop). Columns\n"
              "# whose names or values look like personal data or identifiers start forbidden, dropped\n"
              "# from logs and never stored by the pipeline (ingest: drop); every other column starts\n"
              "# allowed and kept. Review each entry: this is a governance decision, not a default to\n"
              "# trust.\n")
    return header + yaml.safe_dump({"features": features}, sort_keys=False, width=120)


def _consistency_block(found: dict | None) -> str:
    """The config's `span_consistency:` block (or how to write one) for what the data showed."""
    if not found:
        return ("# No event time found (no column whose values fall in their own span's month). If the data\n"
                "# has one, declare it and the data gate checks each span's times and the fields derived\n"
                "# from them (components/data_gate/consistency.py):\n"
                "# span_consistency:\n"
                "#   event_time: {feature: COLUMN, unit: s, timezone: UTC}\n"
                "#   derived: {COLUMN_HOUR: hour}\n")
    event = found["event_time"]
    lines = ["# The event time: the values of this column fall in their own span's month (read as UTC,",
             "# which is assumed: set the time zone the times are in). The data gate checks that a span's",
             "# event times lie in its month and that the fields below, derived from it, agree with it.",
             "span_consistency:",
             f"  event_time: {{feature: {event['feature']}, unit: {event['unit']}, timezone: {event['timezone']}}}",
             f"  tolerance_hours: {found['tolerance_hours']}"]
    if found["derived"]:
        lines.append("  derived:")
        lines += [f"    {column}: {kind}" for column, kind in found["derived"].items()]
    return "\n".join(lines) + "\n"


# Derived kinds that are functions of the span itself (one value per monthly span): like the
# event time, they differ from the previous span by construction, so drift does not watch them.
_SPAN_FUNCTIONS = ("year", "quarter", "month", "month0", "yearmonth")


def drift_opt_outs(found: dict | None) -> dict[str, str]:
    """The drift opt-outs a generated policy starts with: the event time and span functions."""
    if not found:
        return {}
    event = found["event_time"]["feature"]
    out = {event: "the event time: each span holds only its own month's times, so every span differs from the"
                  " one before by construction; span_consistency checks it instead"}
    for column, kind in found["derived"].items():
        if kind in _SPAN_FUNCTIONS:
            out[column] = (f"the {kind} of {event}: a function of the span, different from the previous span's by"
                           " construction; span_consistency checks it instead")
    return out


def _schema_header(p: Plan) -> str:
    return (
        f"# Schema of the {p.name} pipeline, inferred by `retrain new` from {os.path.relpath(p.data_root, p.root)}\n"
        f"# (spans {p.span_numbers[0]}..{p.span_numbers[-1]}). Imported by the pipeline (ImportSchemaGen), never re-inferred:\n"
        "# curate it (domains, presence limits) and commit it. value_count has no min, as blank CSV\n"
        f"# cells arrive as empty lists; the label {p.label!r} is kept out of the SERVING environment.\n"
    )


class _Writer:
    """Writes files, setting aside what it replaces; `rollback` restores the tree as it was."""

    def __init__(self, root: str):
        self.root = root
        self.created: list[str] = []
        self.aside: list[tuple[str, str]] = []
        self.parking: str | None = None

    def clear(self, path: str) -> None:
        if os.path.lexists(path):
            # Parked outside pipelines/ and dags/: the template's source fingerprint, computed
            # before commit(), must not include the replaced copy.
            if self.parking is None:
                import tempfile

                self.parking = tempfile.mkdtemp(prefix=".retrain-new-", dir=self.root)
            parked = os.path.join(self.parking, str(len(self.aside)))
            os.rename(path, parked)
            self.aside.append((path, parked))

    def write(self, rel: str, text: str) -> None:
        path = os.path.join(self.root, rel)
        self.created.append(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        files.write_text(path, text)

    def rollback(self) -> None:
        for path in reversed(self.created):
            if os.path.exists(path):
                os.remove(path)
        for path in sorted({os.path.dirname(p) for p in self.created}, key=len, reverse=True):
            if os.path.isdir(path) and not os.listdir(path):
                os.rmdir(path)
        for path, parked in self.aside:
            if os.path.lexists(path):
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            os.rename(parked, path)
        if self.parking:
            shutil.rmtree(self.parking, ignore_errors=True)

    def commit(self) -> None:
        if self.parking:
            shutil.rmtree(self.parking)


def write(p: Plan, compile_template: Callable[[str, str], None], progress: Callable[[str], None] = lambda m: None) -> list[str]:
    """Writes the pipeline, calibrates its data gate and compiles its DAG template; returns
    the relative paths written. On any failure the tree is put back as it was.

    Args:
      compile_template: (config path, template path) -> None, as `retrain compile` does.
    """
    from pipelines import config as config_lib
    from runner import schema_tools

    writer = _Writer(p.root)
    try:
        for path in p.targets.values():
            writer.clear(path)
        generated = render(p)
        for rel, text in generated.items():
            writer.write(rel, text)
        config_rel = os.path.join("pipelines", p.name, "config.yaml")
        config_path = os.path.join(p.root, config_rel)
        written = list(generated)
        import yaml

        # The gate policy, seeded with a person's decisions that calibration keeps: the drift
        # opt-outs, and columns.new: report (a column a foreign source adds is left out, named
        # in the summary and an alert, instead of stopping the month; components/data_gate/columns.py).
        gate = os.path.join(p.root, "schemas", p.name, "gate.yaml")
        opt_out = drift_opt_outs(p.span_consistency)
        seed = {"version": 1, "columns": {"new": "report"}, **({"opt_out": opt_out} if opt_out else {})}
        writer.write(os.path.relpath(gate, p.root), yaml.safe_dump(seed, sort_keys=False, width=100))
        writer.write(config_rel, generated[config_rel].replace(
            "preprocessing_fn:", f"gate_policy: ../../schemas/{p.name}/gate.yaml\npreprocessing_fn:", 1))
        written.append(os.path.relpath(gate, p.root))
        if len(p.span_numbers) >= 2:
            progress(f"calibrating the data gate on the history of {len(p.span_numbers)} spans")
            config = config_lib.load(config_path)
            result = schema_tools.calibrate_gate(config, p.span_numbers, gate, progress=progress)
            writer.created.append(result["table"])
            written.append(os.path.relpath(result["table"], p.root))
        config_lib.load(config_path)  # what was written must load
        progress("compiling the DAG template")
        template = p.targets["template"]
        writer.created.append(template)
        compile_template(config_path, template)
        written.append(os.path.relpath(template, p.root))
    except BaseException:
        writer.rollback()
        raise
    writer.commit()
    return written
