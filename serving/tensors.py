"""TF Serving's JSON mapping: request values <-> numpy arrays, and JSON examples -> tf.Examples.

Follows TF Serving's `api_rest.md`: `{"b64": ...}` carries binary strings both ways (output
tensors whose name ends in `_bytes` are returned that way), NaN/Infinity are accepted,
row ("instances") and columnar ("inputs") request formats.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np
import tensorflow as tf

from serving.errors import InvalidArgument


def _decode_b64(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"b64"}:
            try:
                return base64.b64decode(value["b64"], validate=True)
            except (binascii.Error, TypeError) as e:
                raise InvalidArgument(f"invalid base64 in {{\"b64\": ...}}: {e}") from e
        raise InvalidArgument(f"unexpected JSON object {sorted(value)} inside a tensor value")
    if isinstance(value, list):
        return [_decode_b64(v) for v in value]
    return value


def to_array(name: str, value: Any, spec: tf.TensorSpec) -> np.ndarray:
    """One input tensor from its JSON value, checked against the signature's spec.

    Raises:
      InvalidArgument: naming the input: wrong type, ragged, or a shape the spec rejects.
    """
    value = _decode_b64(value)
    try:
        if spec.dtype == tf.string:
            array = np.array(value, dtype=object)
            flat = array.reshape(-1)
            for i, v in enumerate(flat):
                if isinstance(v, str):
                    flat[i] = v.encode("utf-8")
                elif not isinstance(v, bytes):
                    raise InvalidArgument(f"input '{name}': expected strings, got {type(v).__name__} {v!r}")
        else:
            if np.array(value, dtype=object).dtype == object and _has_strings(value):
                raise InvalidArgument(f"input '{name}': expected {spec.dtype.name} numbers, got strings")
            array = np.array(value, dtype=spec.dtype.as_numpy_dtype)
    except ValueError as e:
        raise InvalidArgument(f"input '{name}': cannot make a {spec.dtype.name} tensor of it ({e})") from e
    if not spec.shape.is_compatible_with(array.shape):
        raise InvalidArgument(
            f"input '{name}': shape {list(array.shape)} does not match the signature's {spec.shape.as_list()}"
        )
    return array


def _has_strings(value: Any) -> bool:
    if isinstance(value, list):
        return any(_has_strings(v) for v in value)
    return isinstance(value, (str, bytes))


def from_row_format(instances: Any, specs: dict[str, tf.TensorSpec]) -> dict[str, np.ndarray]:
    """`"instances"`: a list, one entry per row (a value, or an object of named inputs)."""
    if not isinstance(instances, list) or not instances:
        raise InvalidArgument("'instances' must be a non-empty list")
    names = sorted(specs)
    if all(isinstance(i, dict) and "b64" not in i for i in instances):
        for i, instance in enumerate(instances):
            missing, extra = set(names) - set(instance), set(instance) - set(names)
            if missing or extra:
                raise InvalidArgument(
                    f"instance {i}: missing input(s) {sorted(missing)}, unknown input(s) {sorted(extra)}"
                    f"; the signature takes {names}"
                )
        return {n: to_array(n, [inst[n] for inst in instances], specs[n]) for n in names}
    if len(names) != 1:
        raise InvalidArgument(f"the signature takes {len(names)} inputs {names}: each instance must be an object")
    return {names[0]: to_array(names[0], instances, specs[names[0]])}


def from_columnar_format(inputs: Any, specs: dict[str, tf.TensorSpec]) -> dict[str, np.ndarray]:
    """`"inputs"`: one tensor value (single-input signature) or an object of named tensors."""
    names = sorted(specs)
    if isinstance(inputs, dict) and "b64" not in inputs:
        missing, extra = set(names) - set(inputs), set(inputs) - set(names)
        if missing or extra:
            raise InvalidArgument(
                f"missing input(s) {sorted(missing)}, unknown input(s) {sorted(extra)}; the signature takes {names}"
            )
        return {n: to_array(n, inputs[n], specs[n]) for n in names}
    if len(names) != 1:
        raise InvalidArgument(f"the signature takes {len(names)} inputs {names}: 'inputs' must be an object")
    return {names[0]: to_array(names[0], inputs, specs[names[0]])}


def _json_value(name: str, array: np.ndarray) -> Any:
    if array.dtype == object:
        binary = name.endswith("_bytes")

        def convert(v):
            if binary:
                return {"b64": base64.b64encode(v).decode("ascii")}
            try:
                return v.decode("utf-8")
            except UnicodeDecodeError:
                return {"b64": base64.b64encode(v).decode("ascii")}

        return np.vectorize(convert, otypes=[object])(array).tolist() if array.size else array.tolist()
    return array.tolist()


def to_row_format(outputs: dict[str, np.ndarray]) -> list:
    """`"predictions"`: one value per row (single output) or one object per row."""
    if len(outputs) == 1:
        [(name, array)] = outputs.items()
        return _json_value(name, array)
    rows = {len(a) for a in outputs.values() if a.ndim}
    if len(rows) != 1:
        raise InvalidArgument("outputs have different 0-th dimensions: use the columnar ('inputs') format")
    columns = {n: _json_value(n, a) for n, a in outputs.items()}
    return [{n: columns[n][i] for n in sorted(columns)} for i in range(rows.pop())]


def to_columnar_format(outputs: dict[str, np.ndarray]) -> Any:
    if len(outputs) == 1:
        [(name, array)] = outputs.items()
        return _json_value(name, array)
    return {n: _json_value(n, a) for n, a in sorted(outputs.items())}


def _feature(name: str, value: Any) -> tf.train.Feature:
    values = value if isinstance(value, list) else [value]
    values = [_decode_b64(v) for v in values]
    if all(isinstance(v, (str, bytes)) for v in values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode("utf-8") if isinstance(v, str) else v for v in values]))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    raise InvalidArgument(f"feature '{name}': values must be all numbers or all strings, got {value!r}")


def examples_from_json(examples: Any, context: Any = None) -> list[bytes]:
    """`"examples"` (+ optional `"context"`) of a classify/regress request -> serialized tf.Examples.

    Raises:
      InvalidArgument: not a list of objects, mixed-type values, or a feature in both.
    """
    if not isinstance(examples, list) or not examples:
        raise InvalidArgument("'examples' must be a non-empty list of objects")
    context = context or {}
    if not isinstance(context, dict):
        raise InvalidArgument("'context' must be an object")
    out = []
    for i, example in enumerate(examples):
        if not isinstance(example, dict):
            raise InvalidArgument(f"example {i} is not an object")
        clash = set(example) & set(context)
        if clash:
            raise InvalidArgument(f"example {i}: feature(s) {sorted(clash)} also in 'context'")
        feats = {k: _feature(k, v) for k, v in {**context, **example}.items()}
        out.append(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return out

