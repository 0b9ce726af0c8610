"""`retrain schema infer`: bootstraps a schema from spans, for a person to curate and check in.

SchemaGen-style inference is a bootstrap step, not a production step: the pipeline
imports the curated `schemas/<pipeline>/schema.pbtxt` and never re-infers it.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from retrain import spans


def infer_schema(data_root: str, span_numbers: list[int], out_path: str, force: bool = False) -> str:
    """Infers a schema from the CSVs of the given spans and writes it as text.

    The CSV is decoded by TFDV's CSV decoder, the same type inference CsvExampleGen uses,
    so an integer column with blanks stays INT (pandas would make it FLOAT).

    Raises:
      FileExistsError: `out_path` exists and `force` is False (a curated schema is never
        overwritten by accident).
    """
    import tensorflow_data_validation as tfdv  # heavy: only when the command runs

    if os.path.exists(out_path) and not force:
        raise FileExistsError(f"{out_path} exists; pass --force to overwrite the curated schema")
    with tempfile.TemporaryDirectory() as tmp:
        merged = os.path.join(tmp, "spans.csv")
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
        stats = tfdv.generate_statistics_from_csv(data_location=merged)
    schema = tfdv.infer_schema(stats)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tfdv.write_schema_text(schema, out_path)
    return out_path
