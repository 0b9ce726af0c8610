"""TF Serving's JSON mapping: request values <-> numpy arrays, and JSON examples -> tf.Examples.

Follows TF Serving's `api_rest.md`: `{"b64": ...}` carries binary strings both ways (output
tensors whose name ends in `_bytes` are returned that way), NaN/Infinity are accepted,
row ("instances") and columnar ("inputs") request formats.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2

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
_DTYPE_ENUMS = {dtype: tf.as_dtype(dtype).as_datatype_enum for dtype in _PROTO_FIELDS}


def fill_proto_field(proto: tensor_pb2.TensorProto, value: Any) -> None:
    """Fills an empty TensorProto (e.g. a response's `outputs[key]`, in place) with the values
    in its typed field (`float_val`, `int64_val`, `string_val`...), not in `tensor_content`:
    what TF Serving's Predict returns. Built directly (tf.make_tensor_proto costs more than
    the model call on small tensors).

    Raises:
      InvalidArgument: a dtype the API cannot carry.
    """
    array = np.asarray(value)
    if array.dtype.kind in "OSU":
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend([v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.ravel()])
    elif array.dtype == np.float16:
        proto.dtype = types_pb2.DT_HALF
        proto.half_val.extend(array.ravel().view(np.uint16).tolist())
    else:
        field = _PROTO_FIELDS.get(array.dtype)
        if field is None:
            raise InvalidArgument(f"cannot return a tensor of dtype {array.dtype}")
        proto.dtype = _DTYPE_ENUMS[array.dtype]
        getattr(proto, field).extend(array.ravel().tolist())
    proto.tensor_shape.SetInParent()  # present for a scalar too, as Tensor::AsProtoField writes it
    dims = proto.tensor_shape.dim
    for d in array.shape:
        dims.add(size=d)


def from_proto(name: str, proto: tensor_pb2.TensorProto) -> np.ndarray:
    """A request's input `name` as a numpy array: strings read directly, the rest through
    tf.make_ndarray.

    Raises:
      InvalidArgument: "tensor parsing error: <name>", TF Serving's text for a TensorProto whose
        values do not make its shape (tensorflow/cc/saved_model/util.cc GetInputValues).
    """
    shape = [d.size for d in proto.tensor_shape.dim]
    try:
        if proto.dtype == types_pb2.DT_STRING:
            values = np.empty(len(proto.string_val), dtype=object)
            values[:] = list(proto.string_val)
            return values.reshape(shape)
        return tf.make_ndarray(proto)
    except (ValueError, TypeError) as e:
        raise InvalidArgument(f"tensor parsing error: {name}") from e


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


def _is_object(value: Any) -> bool:
    """A JSON object of named inputs (not a {"b64": ...} value)."""
    return isinstance(value, dict) and not (set(value) == {"b64"} and isinstance(value["b64"], str))


def predict_inputs(doc: dict, specs: dict[str, tf.TensorSpec]) -> tuple[dict[str, np.ndarray], bool]:
    """(input arrays, row format?) of a predict request, with TF Serving's checks and texts
    (util/json_tensor.cc FillPredictRequestFromJson, FillTensorMapFromInstancesList,
    FillTensorMapFromInputsMap).

    Raises:
      InvalidArgument: both or neither of "instances"/"inputs", or inputs that do not fit the signature.
    """
    has_rows, has_cols = "instances" in doc, "inputs" in doc
    if has_rows and has_cols:
        raise InvalidArgument(f"JSON Value: {json_debug(doc)} Not formatted correctly expecting only one of "
                              "'inputs' or 'instances' keys to exist ")
    if has_rows:
        return _from_row_format(doc, specs), True
    if has_cols:
        return _from_columnar_format(doc["inputs"], specs), False
    raise InvalidArgument("Missing 'inputs' or 'instances' key")


def _from_row_format(doc: dict, specs: dict[str, tf.TensorSpec]) -> dict[str, np.ndarray]:
    """`"instances"`: a list, one entry per row (a value, or an object of named inputs)."""
    instances = doc["instances"]
    if not isinstance(instances, list):
        raise InvalidArgument(f"JSON Value: {json_debug(doc)} Expecting 'instances' to be an list/array")
    if not instances:
        raise InvalidArgument(f"JSON Value: {json_debug(doc)} No values in 'instances' array")
    names = sorted(specs)
    if not isinstance(instances[0], dict) and len(names) > 1:
        raise InvalidArgument("instances is a plain list, but expecting list of objects as multiple "
                              "input tensors required as per tensorinfo_map")
    if _is_object(instances[0]):
        for i, instance in enumerate(instances):
            if not _is_object(instance):
                raise InvalidArgument(f"Expecting object but got list at item {i} of input list")
            if set(instance) != set(names):
                raise InvalidArgument(f"Failed to process element: {i} of 'instances' list. JSON object: "
                                      f"{json_debug(instance)} keys must be equal to: {','.join(names)}")
        return {n: to_array(n, [inst[n] for inst in instances], specs[n]) for n in names}
    for i, instance in enumerate(instances):
        if _is_object(instance):
            raise InvalidArgument(f"Expecting value/list but got object at item {i} of input list")
    return {names[0]: to_array(names[0], instances, specs[names[0]])}


def _from_columnar_format(inputs: Any, specs: dict[str, tf.TensorSpec]) -> dict[str, np.ndarray]:
    """`"inputs"`: one tensor value (single-input signature) or an object of named tensors
    (names the signature does not take are ignored, as TF Serving ignores them)."""
    names = sorted(specs)
    if _is_object(inputs):
        for n in names:
            if n not in inputs:
                raise InvalidArgument(f"Missing named input: {n} in 'inputs' object.")
        return {n: to_array(n, inputs[n], specs[n]) for n in names}
    if len(names) != 1:
        raise InvalidArgument("inputs is a plain value/list, but expecting an object as multiple "
                              "input tensors required as per tensorinfo_map")
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


# util/json_tensor.cc: values in error texts are printed compactly and cut after 256 bytes
# (kMaxJsonDebugStringBytes, JsonWriterWithLimit: a token starts only while under the limit).
_MAX_JSON_DEBUG_BYTES = 256
# rapidjson's GetParseError_En for the errors Python's json module names.
_PARSE_ERRORS = (
    ("Expecting value", "Invalid value."),
    ("Expecting property name enclosed in double quotes", "Missing a name for object member."),
    ("Expecting ':' delimiter", "Missing a colon after a name of object member."),
    ("Unterminated string", "Missing a closing quotation mark in string."),
    ("Invalid control character", "Invalid encoding in string."),
    ("Invalid \\escape", "Invalid escape character in string."),
    ("Invalid \\uXXXX escape", "Incorrect hex digit after \\u escape in string."),
)


def json_type(value: Any) -> str:
    """rapidjson's type name, as TF Serving's JsonTypeString prints it."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    return "String" if isinstance(value, str) else "Number"


def _json_tokens(value: Any):
    if isinstance(value, dict):
        yield "{"
        for i, (k, v) in enumerate(value.items()):
            first = True
            for token in _json_tokens(v):
                yield (("," if i else "") + json.dumps(k, ensure_ascii=False) + ":" + token) if first else token
                first = False
        yield "}"
    elif isinstance(value, list):
        yield "["
        for i, v in enumerate(value):
            first = True
            for token in _json_tokens(v):
                yield ("," + token if i and first else token)
                first = False
        yield "]"
    else:
        yield json.dumps(value, ensure_ascii=False, allow_nan=True)


def json_debug(value: Any) -> str:
    """A JSON value as TF Serving's JsonValueToDebugString prints it in errors: compact,
    truncated to 256 bytes (possibly invalid JSON, as there)."""
    out, size = [], 0
    for token in _json_tokens(value):
        if size >= _MAX_JSON_DEBUG_BYTES:
            break
        out.append(token)
        size += len(token.encode("utf-8"))
    return "".join(out)


def parse_request(body: bytes) -> dict:
    """A REST request body, read as TF Serving's ParseJson reads it (util/json_tensor.cc):
    NaN/Infinity accepted, anything after the first value ignored (kParseStopWhenDoneFlag),
    the top level must be an object.

    Raises:
      InvalidArgument: "JSON Parse error: <rapidjson's message> at offset: N", or
        "JSON Value: <doc> Is not object".
    """
    if not body:
        raise InvalidArgument("JSON Parse error: The document is empty")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgument(f"JSON Parse error: Invalid encoding in string. at offset: {e.start}") from e
    try:
        doc, _ = json.JSONDecoder().raw_decode(text, len(text) - len(text.lstrip()))
    except json.JSONDecodeError as e:
        message = next((theirs for ours, theirs in _PARSE_ERRORS if e.msg.startswith(ours)), None)
        if message is None:  # "Expecting ',' delimiter": which closing bracket depends on where
            inner = text[:e.pos].rstrip()
            opener = max(inner.rfind("{"), inner.rfind("["))
            message = ("Missing a comma or '}' after an object member." if opener >= 0 and inner[opener] == "{"
                       else "Missing a comma or ']' after an array element.")
        raise InvalidArgument(f"JSON Parse error: {message} at offset: {len(text[:e.pos].encode('utf-8'))}") from e
    if not isinstance(doc, dict):
        raise InvalidArgument(f"JSON Value: {json_debug(doc)} Is not object")
    return doc


def signature_name(doc: dict) -> str | None:
    """The optional "signature_name" (FillSignature).

    Raises:
      InvalidArgument: not a string.
    """
    name = doc.get("signature_name")
    if "signature_name" in doc and not isinstance(name, str):
        raise InvalidArgument(f"JSON Value: {json_debug(doc)} not formatted correctly. "
                              "'signature_name' key must be a string value.")
    return name


def _example(value: Any) -> dict[str, tf.train.Feature]:
    if not isinstance(value, dict):
        raise InvalidArgument(f"Example must be JSON object but got JSON {json_type(value)}")
    return {k: _feature(k, v) for k, v in value.items()}


def examples_from_json(doc: dict) -> list[bytes]:
    """The `"examples"` (+ optional `"context"`) of a classify/regress request -> serialized
    tf.Examples, with TF Serving's checks and texts (FillClassifyRegressRequestFromJson). A
    feature in both keeps the example's value, as TF Serving's ExampleListWithContext merge does.

    Raises:
      InvalidArgument: no/empty/non-list "examples", an example or context that is not an
        object, or a feature value TF Serving refuses.
    """
    context = _example(doc["context"]) if "context" in doc else {}
    if "examples" not in doc:
        raise InvalidArgument(f"JSON Value: {json_debug(doc)} When method is classify, key 'examples' "
                              "is expected and was not found")
    examples = doc["examples"]
    if not isinstance(examples, list):
        raise InvalidArgument(f"JSON Value: {json_debug(doc)} Expecting 'examples' value to be an list/array")
    if not examples:
        raise InvalidArgument(f"JSON Value: {json_debug(doc)} 'examples' value is an empty array")
    out = []
    for example in examples:
        feats = {**context, **_example(example)}
        out.append(tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString())
    return out
