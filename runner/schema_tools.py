"""`retrain schema infer`: bootstraps a schema from spans, for a person to curate and check in.

SchemaGen-style inference is a bootstrap step, not a production step: the pipeline
imports the curated `schemas/<pipeline>/schema.pbtxt` and never re-infers it.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile

from core import files, spans
from core.errors import BadInput
from runner import preflight


class SchemaError(BadInput):
    """A schema that cannot be inferred as asked (e.g. a label that is not a column)."""


def infer_schema(data_root: str, span_numbers: list[int], out_path: str, force: bool = False,
                 label: str | None = None, example_format: str = "csv") -> str:
    """Infers a schema from the given spans and writes it as text (`infer_schema_text`).

    Raises:
      FileExistsError: `out_path` exists and `force` is False (a curated schema is never
        overwritten by accident).
      SchemaError: `label` is not a column of the spans (nothing is written).
    """
    if os.path.exists(out_path) and not force:
        raise FileExistsError(f"{out_path} exists; pass --force to overwrite the curated schema")
    text = infer_schema_text(data_root, span_numbers, example_format, label)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    files.write_text(out_path, text)
    return out_path


def infer_schema_text(data_root: str, span_numbers: list[int], example_format: str = "csv",
                      label: str | None = None) -> str:
    """A schema inferred from the spans, as text, with the curation every pipeline needs.

    CSV is decoded by TFDV's CSV decoder, the same type inference CsvExampleGen uses, so an
    integer column with blanks stays INT (pandas would make it FLOAT); Parquet is encoded by
    ParquetExampleGen's fast engine, so each feature's type is its column's Parquet type's
    (core/parquet_columns.py: a float64 column is FLOAT even if its values are whole); TFRecords
    of tf.Examples are read as they are. `value_count` gets no min: blank CSV cells arrive as
    empty lists. With `label`, the schema gets TFDV's TRAINING and SERVING environments and
    the label is kept out of SERVING (served requests carry no label, and the serving-skew
    check validates logged traffic against that environment).

    Raises:
      SchemaError: `label` is not a column of the spans.
    """
    import tensorflow_data_validation as tfdv  # heavy: only when the command runs

    for span in span_numbers:  # bad bytes are bad input (exit 2), named by file and position
        preflight.check_span_structure(spans.span_dir(data_root, span), example_format)
    with tempfile.TemporaryDirectory() as tmp:
        if example_format == "csv":
            merged = os.path.join(tmp, "spans.csv")
            _merge_csv(data_root, span_numbers, merged)
            stats = tfdv.generate_statistics_from_csv(data_location=merged)
        elif example_format == "parquet":
            from components.data_gate import rows

            encoded = [rows.span_examples(spans.span_dir(data_root, s), example_format, os.path.join(tmp, str(s)))
                       for s in span_numbers]
            stats = _merged_tfrecord_stats([path for files in encoded for path in files])
        else:
            pattern = [os.path.join(spans.span_dir(data_root, s), "*" + spans.FILE_SUFFIXES[example_format])
                       for s in span_numbers]
            stats = _merged_tfrecord_stats(pattern)
    schema = tfdv.infer_schema(stats)
    for feature in schema.feature:
        if feature.HasField("value_count"):
            feature.value_count.ClearField("min")
    if label:
        names = [f.name for f in schema.feature]
        if label not in names:
            raise SchemaError(f"label {label!r} is not a column of the spans (columns: {', '.join(names)})")
        schema.default_environment[:] = ["TRAINING", "SERVING"]
        tfdv.get_feature(schema, label).not_in_environment.append("SERVING")
    from google.protobuf import text_format

    return text_format.MessageToString(schema)


def _merge_csv(data_root: str, span_numbers: list[int], merged: str) -> None:
    with open(merged, "w", encoding="utf-8") as out:
        for i, span in enumerate(span_numbers):
            spans.check_span_csv(spans.span_dir(data_root, span))
            folder = spans.span_dir(data_root, span)
            for name in sorted(f for f in os.listdir(folder) if f.endswith(".csv")):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    header = f.readline()
                    if i == 0 and out.tell() == 0:
                        out.write(header)
                    shutil.copyfileobj(f, out)


def _merged_tfrecord_stats(patterns: list[str]):
    """TFDV statistics over the TFRecord files of several spans (one dataset)."""
    import glob

    import tensorflow_data_validation as tfdv

    paths = sorted(p for pattern in patterns for p in glob.glob(pattern))
    with tempfile.TemporaryDirectory() as tmp:
        merged = os.path.join(tmp, "spans.tfrecord.gz")
        import tensorflow as tf

        with tf.io.TFRecordWriter(merged, options="GZIP") as writer:
            for path in paths:
                for record in tf.data.TFRecordDataset(path, compression_type="GZIP"):
                    writer.write(record.numpy())
        return tfdv.generate_statistics_from_tfrecord(data_location=merged)


_POLICY_HEADER = """\
# Data-gate policy of the {pipeline} pipeline, written by `retrain schema calibrate`
# from the spans' own history; review the change, then commit it with
# {table}.
# - features.<name>.k: the limit of each measure is k / n_eff^p (p = 1 for jsd, 1/2
#   otherwise), never below the floors in components/data_gate/policy.py; `observed` is
#   the largest month-to-month (or split-half) value it came from, and where.
# - opt_out: features whose drift is not watched, each with the reason a person gave;
#   calibration keeps them. Completeness and the schema's checks still apply to them.
# - volume: rows of a new span / rows of its baseline span must lie within the bounds.
# - domains.<name>: its value set (value: the span it was first seen in) or range (seen:
#   where its min and max were), and the share of values outside it a span may have
#   (allowed_share, from how often a good span left the other spans' domain: observed).
#   no_domain says why a feature has none; domain_opt_out holds a person's reasons.
# - consistency: the allowed shares of event times outside their span and of derived
#   fields that disagree with the event time (the config's span_consistency declares them).
# - label: the limits of the label's health checks against the spans before it.
# - share_alpha: the level of the share tests (a person may change it; calibration keeps it).
"""


def _label_spec(config, progress) -> tuple[str, str] | None:
    """(label function, kind) for the row scans, or None where the pipeline has none (said so)."""
    from components.data_gate import label as label_lib

    try:
        label_lib.load_fn(config.label_function)
    except label_lib.LabelError as e:
        if config.label_fn is not None:
            raise ValueError(str(e)) from e
        progress(f"the label is not calibrated: {e}")
        return None
    return config.label_function, config.label_kind


def calibrate_gate(
    config,
    span_numbers: list[int],
    out_path: str,
    margin: float | None = None,
    workdir: str | None = None,
    progress=lambda message: None,
) -> dict:
    """Measures the spans' month-to-month history and writes the gate policy and its evidence.

    Spans quarantined in `workdir`'s ML Metadata are left out. The previous policy's
    opt-outs are kept. Both files are written atomically.

    Raises:
      ValueError: fewer than two spans to compare, or a bad margin.
    """
    import csv as csv_lib

    import yaml

    from components.data_gate import calibration
    from components.data_gate import policy as gate_policy
    from pipelines import config as config_lib

    if workdir:
        from governance import quarantine

        where = config_lib.replace(config, workdir=os.path.abspath(workdir)).metadata_store
        skipped = quarantine.quarantined_spans(where, config.pipeline_name)
        if skipped:
            progress(f"leaving out quarantined span(s): {', '.join(map(str, sorted(skipped)))}")
        span_numbers = [s for s in span_numbers if s not in skipped]
    if len(span_numbers) < 2:
        raise ValueError(f"calibration needs at least two spans, got {span_numbers}")
    features = [f.name for f in preflight.load_schema(config.schema_path).feature]
    previous = None
    if os.path.exists(out_path):
        try:
            previous = gate_policy.load(out_path)
        except gate_policy.PolicyError as e:
            raise ValueError(f"the existing policy cannot be read (fix or remove it): {e}") from e
    schema = preflight.load_schema(config.schema_path)
    consistency = config.consistency_settings
    label = _label_spec(config, progress)
    stats, halves, scans = [], [], []
    for i, span in enumerate(span_numbers, 1):
        progress(f"[{i:>3}/{len(span_numbers)}] statistics and rows of span {span}")
        folder = spans.span_dir(config.data_root, span)
        preflight.check_span_files(folder, config.schema_path, config.example_format)
        scan = calibration.span_scan(folder, config.example_format, schema, span, learn=True,
                                     consistency=(consistency, span) if consistency.enabled else None, label=label)
        full, a, b = (t.result() for t in scan.statistics)
        stats.append((span, full))
        halves.append((span, a, b))
        scans.append((span, scan))
    history = calibration.measure_history(stats, features)
    noise = calibration.measure_noise(halves, features)
    policy = calibration.calibrate(
        history, features, previous, margin=margin, noise=noise
    )
    sections, evidence = calibration.calibrate_rows(
        scans, features, policy["calibration"]["margin"], previous, consistency,
        config.label_key if label else None, config.window_spans)
    policy.update(sections)
    table_path = os.path.splitext(out_path)[0] + "_calibration.csv"
    rows = calibration.pair_table(history + noise) + evidence
    header = _POLICY_HEADER.format(pipeline=config.pipeline_name, table=os.path.basename(table_path))
    text = header + yaml.safe_dump(policy, sort_keys=False, width=100)
    try:  # what is written must load; checked before the policy in force is replaced
        checked = gate_policy.from_dict(yaml.safe_load(text), out_path)
        gate_policy.check_features(checked, features)
    except gate_policy.PolicyError as e:  # a bug, not bad input
        raise RuntimeError(f"the calibrated policy does not load (nothing was written): {e}") from e
    columns = list(dict.fromkeys(key for row in rows for key in row))
    buffer = io.StringIO()
    writer = csv_lib.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    files.write_text(out_path, text)
    files.write_text(table_path, buffer.getvalue())
    return {
        "policy": out_path, "table": table_path, "pairs": len(history),
        "features": len(policy["features"]), "opt_out": len(policy["opt_out"]),
    }
