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

# TensorProto's typed value field per numpy dtype, as tensorflow::Tensor::AsProtoField fills
# them: TF Serving's Predict answers this way by default (servables/tensorflow/predict_util.cc,
# kAsProtoField); many clients read `float_val` directly, not `tensor_content`.
_PROTO_FIELDS = {
    np.dtype(np.float32): "float_val", np.dtype(np.float64): "double_val",
    np.dtype(np.int32): "int_val", np.dtype(np.int16): "int_val", np.dtype(np.int8): "int_val",
    np.dtype(np.uint8): "int_val", np.dtype(np.uint16): "int_val",
    np.dtype(np.int64): "int64_val", np.dtype(np.uint32): "uint32_val", np.dtype(np.uint64): "uint64_val",
    np.dtype(np.bool_): "bool_val",
}


def as_proto_field(value: Any) -> Any:
    """A TensorProto with the values in its typed field (`float_val`, `int64_val`,
    `string_val`...), not in `tensor_content`: what TF Serving's Predict returns.

    Raises:
      InvalidArgument: a dtype the API cannot carry.
    """
    array = np.asarray(value)
    if array.dtype.kind in "OSU":
        proto = tf.make_tensor_proto(np.array([], dtype=object), dtype=tf.string, shape=array.shape)
        proto.string_val.extend(v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.ravel())
        return proto
    if array.dtype == np.float16:
        proto = tf.make_tensor_proto(np.array([], np.float16), shape=array.shape)
        proto.half_val.extend(int(v) for v in array.ravel().view(np.uint16))
        return proto
    field = _PROTO_FIELDS.get(array.dtype)
    if field is None:
        raise InvalidArgument(f"cannot return a tensor of dtype {array.dtype}")
    proto = tf.make_tensor_proto(np.array([], array.dtype), shape=array.shape)
    getattr(proto, field).extend(array.ravel().tolist())
    return proto


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


_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64_MAX = (1 << 64) - 1
_FEATURE_KINDS = {"bytes": "bytes_list", "float": "float_list", "int64": "int64_list"}


def _feature_value(name: str, value: Any) -> tuple[str, Any]:
    """(kind, value) of one JSON value of a feature, as TF Serving's AddValueToFeature reads it
    (util/json_tensor.cc): booleans are int64 1/0, numbers written with a fraction or an
    exponent are floats, integers int64 (one beyond int64 that fits uint64 is refused; larger
    ones are read as floats, as rapidjson parses them), strings and {"b64": ...} are bytes.

    Raises:
      InvalidArgument: null, a nested array or an object that is not {"b64": ...}.
    """
    if isinstance(value, bool):
        return "int64", int(value)
    if isinstance(value, str):
        return "bytes", value.encode("utf-8")
    if isinstance(value, float):
        return "float", value
    if isinstance(value, int):
        if _INT64[0] <= value <= _INT64[1]:
            return "int64", value
        if 0 < value <= _UINT64_MAX:
            raise InvalidArgument(f"Feature: {name} has uint64_t element. Only int64_t is supported.")
        return "float", float(value)
    if isinstance(value, dict) and set(value) == {"b64"}:
        return "bytes", _decode_b64(value)
    json_type = "Null" if value is None else "Array" if isinstance(value, list) else "Object"
    raise InvalidArgument(f"Feature: {name} has element with unexpected JSON type: {json_type}")


def _feature(name: str, value: Any) -> tf.train.Feature:
    """One tf.Example feature from JSON: the first value decides the list's kind and every
    other value must be of it (TF Serving's IsFeatureOfKind); an empty list is an empty feature.

    Raises:
      InvalidArgument: "Unexpected element type in feature: <name> expecting type: <kind>".
    """
    kind, values = None, []
    for item in value if isinstance(value, list) else [value]:
        item_kind, item = _feature_value(name, item)
        if kind is not None and item_kind != kind:
            raise InvalidArgument(f"Unexpected element type in feature: {name} expecting type: {kind}")
        kind = item_kind
        values.append(item)
    if kind is None:
        return tf.train.Feature()
    lists = {"bytes": tf.train.BytesList, "float": tf.train.FloatList, "int64": tf.train.Int64List}
    return tf.train.Feature(**{_FEATURE_KINDS[kind]: lists[kind](value=values)})


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

