"""Request logging in TF Serving's format: sampled requests and responses as `PredictionLog`
protos in TFRecord files, configured per model by the `logging_config` TF Serving's
`--model_config_file` accepts (`LoggingConfig`: `sampling_config.sampling_rate`,
`log_collector_config.{type, filename_prefix}`).

    config {
      name: "taxi" base_path: "/srv/serving/taxi" model_platform: "tensorflow"
      logging_config {
        sampling_config { sampling_rate: 0.1 }
        log_collector_config { type: "tfrecord" filename_prefix: "/srv/request_logs/taxi/log" }
      }
    }

TF Serving's open-source build registers no log collector (it is a plug-in point,
`core/log_collector.h`); this server's collector type is "tfrecord": files
`<filename_prefix>.<start ms>.<n>.tfrecord`, each closed after `max_file_bytes` or
`max_file_seconds`, written under a `.part` name until then, the oldest removed beyond
`max_files`. A request never waits on disk, nor builds its log: it queues what it already holds (its
parsed inputs and outputs) in a bounded queue that one thread drains every 50 ms, building,
serializing and writing the PredictionLogs; when the queue is full the log is dropped and
counted (`retrain_serving_request_logs{outcome="dropped"}`), never the request.

The feature policy the answering version carries (core/feature_policy.py, its
`assets.extra/feature_policy.json`) is applied before a log is serialized (`apply_policy`):
a feature whose rule is `log: drop` (or that the policy does not name) is taken out of the
request's examples and tensors, a `log: hash` one is replaced by its keyed hash; neither
reaches disk. A log whose policy cannot be applied (no RETRAIN_LOG_HASH_KEY for a hash rule)
is not written (counted as failed).
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import logging
import os
import random
import struct
import threading
import time
from collections.abc import Callable, Iterator

import google_crc32c
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import prediction_log_pb2
from tensorflow_serving.config import logging_config_pb2

from core import feature_policy as policy_lib
from core import retention
from serving.errors import InvalidArgument

logger = logging.getLogger(__name__)

COLLECTOR_TYPE = "tfrecord"
SUFFIX = ".tfrecord"
PART = ".part"


@dataclasses.dataclass(frozen=True)
class LogLimits:
    """How much request log a model may keep on disk, and how long a file stays open."""

    max_file_bytes: int = 16 << 20
    max_files: int = 8
    max_file_seconds: float = 300.0
    queue_size: int = 10_000
    # Retention (core/retention.py): finished files older than this are deleted, each
    # deletion logged; None keeps them until max_files pushes them out.
    max_age_days: float | None = None


def check(name: str, config: logging_config_pb2.LoggingConfig) -> None:
    """Validates a model's `logging_config`.

    Raises:
      InvalidArgument: a sampling rate outside [0, 1], an unknown collector type, or no prefix.
    """
    rate = config.sampling_config.sampling_rate
    if not 0.0 <= rate <= 1.0:
        raise InvalidArgument(f"model {name}: logging_config sampling_rate {rate} is not within [0, 1]")
    collector = config.log_collector_config
    if collector.type != COLLECTOR_TYPE:
        raise InvalidArgument(f"model {name}: log collector type {collector.type!r} is not supported "
                              f"(this server writes {COLLECTOR_TYPE!r})")
    if not collector.filename_prefix:
        raise InvalidArgument(f"model {name}: log_collector_config needs a filename_prefix")


def log_files(filename_prefix: str) -> list[str]:
    """The finished log files of a prefix, oldest first (files still being written are not listed)."""
    return sorted(glob.glob(glob.escape(filename_prefix) + ".*" + SUFFIX), key=_order)


def _order(path: str) -> tuple[int, int]:
    parts = os.path.basename(path)[: -len(SUFFIX)].rsplit(".", 2)
    try:
        return int(parts[-2]), int(parts[-1])
    except (ValueError, IndexError):
        return 0, 0


def read(filename_prefix: str) -> Iterator[prediction_log_pb2.PredictionLog]:
    """Every PredictionLog of a prefix's finished files, oldest first."""
    for path in log_files(filename_prefix):
        yield from read_file(path)


def read_file(path: str) -> Iterator[prediction_log_pb2.PredictionLog]:
    """The PredictionLogs of one finished log file, one at a time."""
    for record in tf.data.TFRecordDataset(path):
        yield prediction_log_pb2.PredictionLog.FromString(record.numpy())


class RequestLogger:
    """One model's sampled request log."""

    # How often the writer drains what requests queued: requests only append to a deque
    # (no lock, no wake-up of another thread per request); building, serializing and
    # writing the logs happens here, off the request path.
    FLUSH_SECONDS = 0.05

    def __init__(self, name: str, config: logging_config_pb2.LoggingConfig, limits: LogLimits = LogLimits(),
                 metrics=None):
        check(name, config)
        self.name, self.rate, self._limits, self._metrics = name, config.sampling_config.sampling_rate, limits, metrics
        self.prefix = config.log_collector_config.filename_prefix
        self._sampling = logging_config_pb2.SamplingConfig()
        self._sampling.CopyFrom(config.sampling_config)
        self._pending: collections.deque = collections.deque()
        self._policy_error_said = False
        self._closing = threading.Event()
        self._writer, self._path, self._size, self._opened, self._seq = None, "", 0, 0.0, 0
        self._thread = threading.Thread(target=self._write_loop, name=f"request-log-{name}", daemon=True)
        self._thread.start()

    def sampled(self) -> bool:
        """Whether this request is logged (TF Serving samples each request independently)."""
        return self.rate > 0 and (self.rate >= 1 or random.random() < self.rate)

    def log(self, log: prediction_log_pb2.PredictionLog | Callable[[], prediction_log_pb2.PredictionLog],
            model_spec, signature: str, version: int, key: str | None = None,
            policy: policy_lib.FeaturePolicy | None = None) -> None:
        """Queues one log with its LogMetadata; drops it (counted) if the writer is behind.

        `log` is the PredictionLog or a function that builds it (called in the writer's
        thread, so a request does not pay for its log's protos; what it reads must not change
        after the request). The metadata says which version answered (`model_spec.version`),
        when (`timestamp_secs`) and, as `request_origin`, the request's key (its
        X-Request-Id, else the SHA-256 of its body), which delayed labels are joined by
        (rollout/join.py). `model_spec` None: the model's name. `policy`: the answering
        version's feature policy, applied before the log is written (`apply_policy`)."""
        if len(self._pending) >= self._limits.queue_size:
            self._count("dropped")
            return
        self._pending.append((log, model_spec, signature, version, key, int(time.time()), policy))

    def close(self, timeout: float = 10.0) -> None:
        """Writes what is queued, closes the current file."""
        self._closing.set()
        self._thread.join(timeout)

    def _count(self, outcome: str, n: int = 1) -> None:
        if self._metrics is not None and n:
            self._metrics.request_logs.labels(self.name, outcome).inc(n)

    def _record(self, item) -> bytes:
        log, model_spec, signature, version, key, timestamp, policy = item
        if callable(log):
            log = log()
        if policy is not None and policy.rules:
            apply_policy(log, policy, policy_lib.hash_key() if policy.needs_hash_key else None)
        metadata = log.log_metadata
        if model_spec is not None:
            metadata.model_spec.CopyFrom(model_spec)
        else:
            metadata.model_spec.name = self.name
        metadata.model_spec.signature_name = signature
        metadata.model_spec.version.value = version
        metadata.timestamp_secs = timestamp
        if key:
            metadata.request_origin = key
        metadata.sampling_config.CopyFrom(self._sampling)
        metadata.saved_model_tags.append(tf.saved_model.SERVING)
        return log.SerializeToString()

    def _write_loop(self) -> None:
        while True:
            closing = self._closing.wait(self.FLUSH_SECONDS)
            written = failed = 0
            while self._pending:
                item = self._pending.popleft()
                try:
                    data = tfrecord(self._record(item))
                    self._file().write(data)
                    self._size += len(data)
                    written += 1
                except policy_lib.PolicyError as e:  # no hash key: nothing of this log is written
                    if not self._policy_error_said:
                        logger.error("request log %s: logs are not written: %s", self.prefix, e)
                        self._policy_error_said = True
                    failed += 1
                except Exception:  # noqa: BLE001  a log that cannot be written must not stop the writer
                    logger.exception("request log %s: cannot write", self.prefix)
                    failed += 1
                if self._size >= self._limits.max_file_bytes:
                    self._finish_file()
            if self._writer is not None:
                self._writer.flush()  # what was drained is on disk (a crash keeps it in the .part file)
            self._count("written", written)
            self._count("failed", failed)
            if self._writer is not None and (closing or time.monotonic() - self._opened >= self._limits.max_file_seconds):
                self._finish_file()
            if closing:
                return

    def _file(self):
        if self._writer is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.prefix)), exist_ok=True)
            self._seq += 1
            self._path = f"{self.prefix}.{int(time.time() * 1000)}.{self._seq}{SUFFIX}{PART}"
            self._writer, self._size, self._opened = open(self._path, "wb"), 0, time.monotonic()
        return self._writer

    def _finish_file(self) -> None:
        self._writer.close()
        os.replace(self._path, self._path[: -len(PART)])
        self._writer = None
        self._trim()

    def _trim(self) -> None:
        finished = log_files(self.prefix)
        for old in finished[: max(0, len(finished) - self._limits.max_files)]:
            try:
                os.remove(old)
            except OSError:
                logger.warning("request log: cannot remove %s", old)
        if self._limits.max_age_days is not None:
            retention.delete_expired(log_files(self.prefix), self._limits.max_age_days, "request log")



def _masked_crc(data: bytes) -> bytes:
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def tfrecord(data: bytes) -> bytes:
    """One TFRecord: length, masked CRC32C of the length, data, masked CRC32C of the data
    (TensorFlow's TFRecordWriter writes the same bytes; written here in Python, into a
    buffered file, because its per-record call cost a fifth of the request log's thread)."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, _masked_crc(length), data, _masked_crc(data)))


def predict_log(request, response) -> prediction_log_pb2.PredictionLog:
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.CopyFrom(request)
    log.predict_log.response.CopyFrom(response)
    return log


def classify_log(request, response) -> prediction_log_pb2.PredictionLog:
    log = prediction_log_pb2.PredictionLog()
    log.classify_log.request.CopyFrom(request)
    log.classify_log.response.CopyFrom(response)
    return log


def regress_log(request, response) -> prediction_log_pb2.PredictionLog:
    log = prediction_log_pb2.PredictionLog()
    log.regress_log.request.CopyFrom(request)
    log.regress_log.response.CopyFrom(response)
    return log


def input_examples(input_proto) -> list[bytes]:
    """A classify/regress `Input`'s examples, serialized, with the context merged into each
    (a feature in both keeps the example's value, as TF Serving's merge does)."""
    kind = input_proto.WhichOneof("kind")
    if kind == "example_list":
        return [e.SerializeToString() for e in input_proto.example_list.examples]
    if kind == "example_list_with_context":
        context = input_proto.example_list_with_context.context
        out = []
        for e in input_proto.example_list_with_context.examples:
            merged = tf.train.Example()
            merged.CopyFrom(context)
            merged.MergeFrom(e)
            out.append(merged.SerializeToString())
        return out
    return []


def _parsed_examples(values) -> list[tf.train.Example] | None:
    """The values parsed as tf.Examples, or None if they are not (all of them, with features)."""
    out = []
    for value in values:
        try:
            example = tf.train.Example.FromString(value)
        except Exception:  # noqa: BLE001  (protobuf's DecodeError): not an Example
            return None
        if not example.features.feature:
            return None
        out.append(example)
    return out


def _serialized_examples(values) -> list[bytes] | None:
    """The values as serialized tf.Examples, or None if they are not."""
    return None if _parsed_examples(values) is None else list(values)


def _feature(values) -> tf.train.Feature:
    flat = np.asarray(values).ravel()
    if flat.dtype.kind in "OSU":
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v if isinstance(v, bytes) else str(v).encode() for v in flat]))
    if flat.dtype.kind in "iub":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=flat.astype(np.int64).tolist()))
    return tf.train.Feature(float_list=tf.train.FloatList(value=flat.astype(np.float32).tolist()))


def _hashed_bytes(value: bytes, key: bytes) -> bytes:
    return policy_lib.keyed_hash(value, key).encode()


def _apply_to_example(example: tf.train.Example, policy: policy_lib.FeaturePolicy, key: bytes | None) -> None:
    features = example.features.feature
    for name in list(features):
        action = policy.log_action(name)
        if action == "drop":
            del features[name]
        elif action == "hash":
            feature = features[name]
            kind = feature.WhichOneof("kind")
            raw = [v if isinstance(v, bytes) else repr(v).encode() for v in getattr(feature, kind).value] if kind else []
            features[name].CopyFrom(tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[_hashed_bytes(v, key) for v in raw])))


def _apply_to_serialized(values, policy, key) -> list[bytes] | None:
    """Serialized tf.Examples with the policy applied, or None where they are not examples."""
    parsed = _parsed_examples(values)
    if parsed is None:
        return None
    for example in parsed:
        _apply_to_example(example, policy, key)
    return [e.SerializeToString() for e in parsed]


def apply_policy(log: prediction_log_pb2.PredictionLog, policy: policy_lib.FeaturePolicy, key: bytes | None) -> None:
    """Takes out of a log's request what the feature policy keeps off disk, in place: the
    features of its examples (classify/regress inputs, a predict request's serialized
    tf.Examples) and its named input tensors (input name = feature name), dropped or
    replaced by their keyed hash (`log: hash`; `key` from core.feature_policy.hash_key).
    Model outputs are kept."""
    kind = log.WhichOneof("log_type")
    if kind in ("classify_log", "regress_log"):
        request_input = getattr(log, kind).request.input
        which = request_input.WhichOneof("kind")
        if which == "example_list":
            for example in request_input.example_list.examples:
                _apply_to_example(example, policy, key)
        elif which == "example_list_with_context":
            _apply_to_example(request_input.example_list_with_context.context, policy, key)
            for example in request_input.example_list_with_context.examples:
                _apply_to_example(example, policy, key)
        return
    if kind != "predict_log":
        return
    inputs = log.predict_log.request.inputs
    for name in list(inputs):
        proto = inputs[name]
        if proto.dtype == types_pb2.DT_STRING:
            examples = _apply_to_serialized(proto.string_val, policy, key)
            if examples is not None:
                del proto.string_val[:]
                proto.string_val.extend(examples)
                continue
        action = policy.log_action(name)
        if action == "drop":
            del inputs[name]
        elif action == "hash":
            array = tf.make_ndarray(proto)
            flat = [v if isinstance(v, bytes) else repr(v.item() if hasattr(v, "item") else v).encode()
                    for v in array.ravel()]
            hashed = np.array([_hashed_bytes(v, key) for v in flat], dtype=object).reshape(array.shape)
            inputs[name].CopyFrom(tf.make_tensor_proto(hashed))


def logged_examples(log: prediction_log_pb2.PredictionLog) -> list[bytes]:
    """The examples a logged request carried, serialized: classify/regress inputs (context
    merged in), or a predict request's serialized tf.Examples, or its named input tensors
    as one example per row (feature = input name)."""
    kind = log.WhichOneof("log_type")
    if kind in ("classify_log", "regress_log"):
        return input_examples(getattr(log, kind).request.input)
    if kind != "predict_log":
        return []
    inputs = log.predict_log.request.inputs
    for proto in inputs.values():
        if proto.dtype == types_pb2.DT_STRING:
            found = _serialized_examples(proto.string_val)
            if found:
                return found
    arrays = {name: tf.make_ndarray(proto) for name, proto in inputs.items()}
    rows = {a.shape[0] for a in arrays.values() if a.ndim}
    if len(rows) != 1:
        return []
    [count] = rows
    return [tf.train.Example(features=tf.train.Features(feature={
        name: _feature(a[i]) for name, a in arrays.items()})).SerializeToString() for i in range(count)]
