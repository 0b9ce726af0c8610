"""Served-model traffic for tests: rows sent as classify requests through the server's
request logger, so they land as TF Serving PredictionLogs where the skew check reads them."""

import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, model_pb2
from tensorflow_serving.config import logging_config_pb2

from runner import preflight
from serving.server import request_log


def example(row: dict, types: dict, label: str) -> tf.train.Example:
    """A request's tf.Example as a client builds it from a CSV row (no label, empty cells left out)."""
    feats = {}
    for k, v in row.items():
        if k == label or v == "":
            continue
        if types[k] == 1:
            feats[k] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[v.encode()]))
        elif types[k] == 2:
            feats[k] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v)]))
        else:
            feats[k] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))
    return tf.train.Example(features=tf.train.Features(feature=feats))


def log_traffic(prefix: str, schema_path: str, label: str, rows: list[dict], version: int, model: str = "taxi",
                batch: int = 4, types: dict | None = None) -> None:
    """Logs `rows` as classify requests of `batch` examples to `version` of `model`; each
    feature typed as the schema says, unless `types` says otherwise (a client's type bug)."""
    types = {**{f.name: f.type for f in preflight.load_schema(schema_path).feature}, **(types or {})}
    logging_config = logging_config_pb2.LoggingConfig()
    logging_config.sampling_config.sampling_rate = 1.0
    logging_config.log_collector_config.type = request_log.COLLECTOR_TYPE
    logging_config.log_collector_config.filename_prefix = prefix
    logger = request_log.RequestLogger(model, logging_config)
    spec = model_pb2.ModelSpec(name=model, signature_name="classification")
    for start in range(0, len(rows), batch):
        request = classification_pb2.ClassificationRequest(model_spec=spec)
        for row in rows[start:start + batch]:
            request.input.example_list.examples.append(example(row, types, label))
        logger.log(request_log.classify_log(request, classification_pb2.ClassificationResponse()), spec,
                   "classification", version)
    logger.close()
