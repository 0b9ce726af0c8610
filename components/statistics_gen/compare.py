"""Whether two statistics protos say the same: feature by feature (their order in a proto is
the merge's, not the data's), numbers to 10 significant digits (Beam and the in-memory
engine merge partial sums in another order: a standard deviation of 12.065879808598938
against 12.06587980859894). TensorFlow-free; for the engine's tests and benchmark."""

from __future__ import annotations

from typing import Any


def rounded(value: Any, digits: int = 10) -> Any:
    """`value` (a number, or a dict or list of them, as MessageToDict gives) to `digits` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    return value


def by_feature(dataset) -> dict:
    """A DatasetFeatureStatistics as {"num_examples": n, "<path>": feature's dict, rounded}."""
    from google.protobuf import json_format

    return {"num_examples": dataset.num_examples,
            **{".".join(f.path.step): rounded(json_format.MessageToDict(f)) for f in dataset.features}}
