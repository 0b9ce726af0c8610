"""Tabular datasets that ship inside scikit-learn, written as monthly CSV spans.

The rule (the same for every dataset, so anyone can rebuild the spans): rows are shuffled
with a fixed seed (numpy's default_rng(0)) and dealt round-robin into `num_spans`
consecutive months from `first_span`; column names are snake_case; columns whose values
are all whole numbers are written as integers. Nothing is downloaded: these files are part
of the scikit-learn wheel.

    retrain sample-spans --dataset diabetes --out data/diabetes   # the embedded diabetes data
"""

from __future__ import annotations

import os
import re

from core import spans

# name -> (scikit-learn loader, its keyword arguments, the label column, the task it suits).
DATASETS = {
    # 442 patients: disease progression one year after baseline (a number, 25..346).
    "diabetes": ("load_diabetes", {"scaled": False}, "progression", "regression"),
    # 569 tumours: malignant or benign from 30 cell-nucleus measurements.
    "breast_cancer": ("load_breast_cancer", {}, "diagnosis", "binary_classification"),
    # 178 wines: one of three cultivars from 13 chemical measurements.
    "wine": ("load_wine", {}, "cultivar", "multiclass_classification"),
}
FIRST_SPAN = 202401
NUM_SPANS = 6


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.strip().lower()).strip("_")


def _column(values) -> list[str]:
    import numpy as np

    values = np.asarray(values)
    if values.dtype.kind in "iu" or (values.dtype.kind == "f" and np.all(np.mod(values, 1) == 0)):
        return [str(int(v)) for v in values]
    if values.dtype.kind == "f":
        return [repr(float(v)) for v in values]
    return [str(v) for v in values]


def write_spans(dataset: str, out_root: str, first_span: int = FIRST_SPAN, num_spans: int = NUM_SPANS) -> dict[int, int]:
    """Writes `span-YYYYMM/data.csv` folders of a bundled dataset; returns rows per span.

    Each span is written atomically (core.spans.write_span), and no existing span folder
    is ever written over.

    Raises:
      spans.SpanError: unknown dataset, a bad span count, or span folders that already exist.
    """
    import numpy as np
    import sklearn.datasets

    if dataset not in DATASETS:
        raise spans.SpanError(f"unknown dataset {dataset!r}; known: {', '.join(sorted(DATASETS))}")
    if num_spans < 1:
        raise spans.SpanError(f"--spans must be at least 1, got {num_spans}")
    loader, kwargs, label, _ = DATASETS[dataset]
    bunch = getattr(sklearn.datasets, loader)(**kwargs)
    targets = [spans.shift_span(first_span, i) for i in range(num_spans)]
    clashes = [s for s in targets if os.path.exists(spans.span_dir(out_root, s))]
    if clashes:
        raise spans.SpanError(f"span folders already exist under {out_root!r}: {clashes}")
    names = [_snake(n) for n in bunch.feature_names] + [label]
    target = bunch.target
    if getattr(bunch, "target_names", None) is not None and len(bunch.target_names):
        target = np.asarray(bunch.target_names)[bunch.target]  # class names, not codes
    columns = [_column(bunch.data[:, j]) for j in range(bunch.data.shape[1])] + [_column(target)]
    order = np.random.default_rng(0).permutation(len(bunch.target))
    counts = {}
    for i, span in enumerate(targets):
        rows = order[i::num_spans]
        spans.write_span(out_root, span, names, ([col[r] for col in columns] for r in rows))
        counts[span] = len(rows)
    return counts
