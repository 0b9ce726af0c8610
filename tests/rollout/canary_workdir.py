"""A workdir with a canary under test and its evidence, for tests that cannot load TensorFlow
themselves (the Airflow suite runs this in the TFX runtime):

  python -m tests.rollout.canary_workdir WORKDIR [--model taxi] [--canary-weight -2] [--requests 1500]

Writes two scorer versions (stable w = 2, canary w = --canary-weight), labels them in
models.config with a 50% split, logs `--requests` keyed requests answered by each version as
the split would route them (serving/server/routing.py), and writes their true labels as feedback.
"""

import argparse
import os
import time

# isort: off
from core import keras_env  # noqa: F401  (before TensorFlow)
import tensorflow as tf
# isort: on
from tensorflow_serving.apis import model_pb2, predict_pb2
from tensorflow_serving.config import logging_config_pb2

from core import layout
from rollout import feedback
from serving.repository import model_config, versions
from serving.server import request_log, routing
from tests import waiting
from tests.rollout import toy_scorer


def build(workdir: str, model: str, canary_weight: float, requests: int, share: float = 0.5) -> None:
    root = layout.serving_root(workdir)
    base = os.path.join(root, model)
    weights = {1: 2.0, 2: canary_weight}
    for version, weight in weights.items():
        toy_scorer.save(os.path.join(base, str(version)), version, weight)
    config = model_config.single_model(model, base)
    prefix = layout.request_log_prefix(workdir, model)
    model_config.set_request_log(config, model, 1.0, prefix)
    model_config.write(config, versions.config_path(root))
    versions.start_canary(root, model, 1, share, reason="first")
    versions.start_canary(root, model, 2, share, reason="blessed candidate")
    examples, labels = toy_scorer.examples(requests, seed=7)
    logging_config = logging_config_pb2.LoggingConfig()
    logging_config.sampling_config.sampling_rate = 1.0
    logging_config.log_collector_config.type = request_log.COLLECTOR_TYPE
    logging_config.log_collector_config.filename_prefix = prefix
    logger = request_log.RequestLogger(model, logging_config)
    loaded = {v: tf.saved_model.load(os.path.join(base, str(v))).signatures["serving_default"] for v in weights}
    keys = [f"req-{i}" for i in range(requests)]
    # Request logs keep whole seconds: the first record must fall after the canary started.
    started = versions.rollout_state(base)["started_at"]
    waiting.until(lambda: int(time.time()) > started, 2.0, "a whole second after the canary started")
    for key, example in zip(keys, examples):
        version = 2 if routing.to_canary(key, share) else 1
        outputs = loaded[version](examples=tf.constant([example]))
        spec = model_pb2.ModelSpec(name=model, signature_name="serving_default")
        request = predict_pb2.PredictRequest(model_spec=spec)
        request.inputs["examples"].CopyFrom(tf.make_tensor_proto([example]))
        response = predict_pb2.PredictResponse(model_spec=spec)
        for name, value in outputs.items():
            response.outputs[name].CopyFrom(tf.make_tensor_proto(value.numpy()))
        logger.log(request_log.predict_log(request, response), spec, "serving_default", version, key)
    logger.close()
    feedback.write(os.path.join(layout.feedback_dir(workdir, model), "labels.jsonl"),
                   [{"request_key": k, "label": int(y), "time": time.time() + 3600} for k, y in zip(keys, labels)])


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("workdir")
    p.add_argument("--model", default="taxi")
    p.add_argument("--canary-weight", type=float, default=-2.0)
    p.add_argument("--requests", type=int, default=1500)
    a = p.parse_args()
    build(a.workdir, a.model, a.canary_weight, a.requests)
    print(f"canary under test in {a.workdir}")
