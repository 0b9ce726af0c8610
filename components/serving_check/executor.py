"""The pre-push serving check (what TFX's InfraValidator does with Docker, which these
machines lack): the candidate is loaded by a separate server process (`python -m serving`), sent real
requests built from evaluation examples over REST and gRPC, and must answer what the
SavedModel answers in-process, within a latency budget. With a baseline (the last blessed
model), the same server serves it beside the candidate, both get the same requests, and
the computing figures are compared (performance.py): latency, SavedModel size and
training throughput must not have regressed past the config's `performance:` limits.

It also writes the TF Serving warm-up requests (`tf_serving_warmup_requests`) the Pusher
puts into the pushed version, and replays them in the check server (TF Serving's load
fails if warm-up fails, so this is checked too).
"""

from __future__ import annotations

import base64
import glob
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

from components.serving_check import performance
from core import layout
from core.files import write_text
from task_host import client as warm_client

logger = logging.getLogger(__name__)

WARMUP_FILENAME = "tf_serving_warmup_requests"
REPORT_FILENAME = layout.SERVING_CHECK_FILE


def read_examples(files: list[str], limit: int) -> list[bytes]:
    import tensorflow as tf

    out: list[bytes] = []
    for path in files:
        compression = "GZIP" if path.endswith(".gz") else ""
        for record in tf.data.TFRecordDataset(path, compression_type=compression):
            out.append(record.numpy())
            if len(out) >= limit:
                return out
    return out


def write_warmup(path: str, model_name: str, examples: list[bytes], signature: str = "serving_default",
                 input_key: str = "examples") -> int:
    """TF Serving warm-up file: PredictionLogs of predict requests with real examples."""
    import tensorflow as tf
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    count = 0
    with tf.io.TFRecordWriter(path) as writer:
        for size in (1, min(8, len(examples)), len(examples)):
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
            )
            request.inputs[input_key].CopyFrom(tf.make_tensor_proto(np.array(examples[:size], dtype=object)))
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
            count += 1
    return count


def _http(url: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _rows(predictions) -> np.ndarray:
    if predictions and isinstance(predictions[0], dict):
        keys = sorted(predictions[0])
        return np.array([np.concatenate([np.ravel(p[k]) for k in keys]) for p in predictions], dtype=float)
    return np.array([np.ravel(p) for p in predictions], dtype=float)


def _reference(saved_model_dir: str, signature: str, input_key: str, examples: list[bytes]) -> np.ndarray:
    import tensorflow as tf

    from serving.server import tensors

    fn = tf.saved_model.load(saved_model_dir).signatures[signature]
    outputs = {k: v.numpy() for k, v in fn(**{input_key: tf.constant(examples)}).items()}
    return _rows(tensors.to_row_format(outputs))


def _stop(proc: subprocess.Popen | warm_client.WarmProcess) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start_server(cmd: list[str], log) -> subprocess.Popen | warm_client.WarmProcess:
    """The check's server in its own process group: forked from the warm TFX runtime where
    this task has one ($RETRAIN_WARM_SOCKET; TensorFlow already imported, ~4 s less), else a
    fresh process. Either way a separate process, so a model that crashes its server fails
    the check, not the task."""
    proc = warm_client.start(cmd, os.environ, os.getcwd(), output=log,
                             say=lambda msg: logger.info("serving check: %s", msg))
    if proc is not None:
        return proc
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def run_check(
    saved_model_dir: str,
    example_files: list[str],
    model_name: str,
    out_dir: str,
    num_requests: int = 20,
    max_latency_ms: float = 500.0,
    startup_timeout_s: float = 180.0,
    signature: str = "serving_default",
    input_key: str = "examples",
    sign_with=None,
    baseline_dir: str | None = None,
    performance_settings: performance.PerformanceSettings | None = None,
    training_rates: tuple[float | None, float | None] = (None, None),
) -> dict:
    """Checks the candidate in a separate server process; returns the report (also written
    to `<out_dir>/serving_check.json`) and leaves the warm-up file in `out_dir`.

    With `baseline_dir` (the model it would replace) and `performance_settings` enabled, the
    baseline is served beside it by the same server and sent the same requests, and the
    computing figures are compared (performance.py); `training_rates` are the candidate's and
    the baseline's training examples/s."""
    os.makedirs(out_dir, exist_ok=True)
    reasons: list[str] = []
    report: dict = {"model_name": model_name, "signature": signature, "latency_budget_ms": max_latency_ms}
    examples = read_examples(example_files, num_requests)
    if not examples:
        reasons.append(f"no evaluation examples in {example_files}")
        return _finish(out_dir, report, reasons)
    warmup = os.path.join(out_dir, WARMUP_FILENAME)
    report["warmup_requests"] = write_warmup(warmup, model_name, examples, signature, input_key)

    # The candidate as version 1 of a private base path, carrying the warm-up file.
    base = os.path.join(out_dir, "candidate")
    shutil.rmtree(base, ignore_errors=True)
    shutil.copytree(saved_model_dir, os.path.join(base, "1"))
    os.makedirs(os.path.join(base, "1", "assets.extra"), exist_ok=True)
    shutil.copy(warmup, os.path.join(base, "1", "assets.extra", WARMUP_FILENAME))
    verify = []
    if sign_with is not None:  # signed as the Pusher signs; the server verifies before loading
        from serving.repository import signing

        report["signed"] = signing.sign_version(os.path.join(base, "1"), sign_with)
        public = os.path.join(out_dir, "trusted-key.pem")
        with open(public, "wb") as f:
            f.write(sign_with.public_pem())
        verify = ["--require-signed", "--trusted-key", public]

    compare = baseline_dir is not None and performance_settings is not None and performance_settings.enabled
    served = ["--model-name", model_name, "--model-base-path", base]
    baseline_base = os.path.join(out_dir, "baseline")
    if compare:
        # The baseline beside it in the same server, as the model it would replace.
        shutil.rmtree(baseline_base, ignore_errors=True)
        shutil.copytree(baseline_dir, os.path.join(baseline_base, "1"))
        # Warmed at load by the same warm-up requests as the candidate (its own model name),
        # so neither model's first timed request is a cold one.
        os.makedirs(os.path.join(baseline_base, "1", "assets.extra"), exist_ok=True)
        write_warmup(os.path.join(baseline_base, "1", "assets.extra", WARMUP_FILENAME), model_name + BASELINE_SUFFIX,
                     examples, signature, input_key)
        if sign_with is not None:
            from serving.repository import signing

            signing.sign_version(os.path.join(baseline_base, "1"), sign_with)
        served = ["--model-config-file", _two_models_config(out_dir, model_name, base, baseline_base)]
    port_file = os.path.join(out_dir, "ports.json")
    log_path = os.path.join(out_dir, "server.log")
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = _start_server([sys.executable, "-m", "serving", *served, "--rest-port", "0", "--grpc-port", "0",
                              "--port-file", port_file, "--poll-seconds", "3600", *verify], log)
        report["server_started"] = "cold" if isinstance(proc, subprocess.Popen) else "warm"
    try:
        while not os.path.exists(port_file):
            if proc.poll() is not None:
                reasons.append(f"the server exited with code {proc.returncode} before serving; see {log_path}")
                return _finish(out_dir, report, reasons, log_path)
            if time.perf_counter() - start > startup_timeout_s:
                reasons.append(f"the server did not start within {startup_timeout_s:.0f} s")
                return _finish(out_dir, report, reasons, log_path)
            time.sleep(0.2)
        report["startup_seconds"] = round(time.perf_counter() - start, 2)
        with open(port_file, encoding="utf-8") as f:
            ports = json.load(f)
        url = f"http://127.0.0.1:{ports['rest']}/v1/models/{model_name}"
        _, status = _http(url)
        states = {s["version"]: s for s in status.get("model_version_status", [])}
        if states.get("1", {}).get("state") != "AVAILABLE":
            error = states.get("1", {}).get("status", {}).get("error_message") or status
            reasons.append(f"the candidate did not load: {error}")
            return _finish(out_dir, report, reasons, log_path)

        baseline_url = None
        if compare:
            baseline_url = f"http://127.0.0.1:{ports['rest']}/v1/models/{model_name}{BASELINE_SUFFIX}"
            _, b_status = _http(baseline_url)
            if {s["version"]: s for s in b_status.get("model_version_status", [])}.get("1", {}).get("state") != "AVAILABLE":
                report["baseline_error"] = f"the baseline did not load: {b_status}"
                baseline_url = None
        expected = _reference(saved_model_dir, signature, input_key, examples)
        latencies, baseline_latencies, max_diff = [], [], 0.0
        for i, example in enumerate(examples):
            body = {"signature_name": signature, "instances": [{"b64": base64.b64encode(example).decode()}]}
            if baseline_url and i % 2:  # the baseline first every other request: neither always goes second
                baseline_latencies.append(_timed(baseline_url + ":predict", body))
            t0 = time.perf_counter()
            code, answer = _http(url + ":predict", body)
            latencies.append((time.perf_counter() - t0) * 1000)
            if baseline_url and not i % 2:
                baseline_latencies.append(_timed(baseline_url + ":predict", body))
            if code != 200:
                reasons.append(f"REST request {i} failed with HTTP {code}: {answer.get('error')}")
                break
            max_diff = max(max_diff, float(np.abs(_rows(answer["predictions"]) - expected[i : i + 1]).max()))
        max_diff = max(max_diff, _grpc_check(ports["grpc"], model_name, signature, input_key, examples, expected, reasons))
        report["requests"] = len(latencies) + 1
        report["max_abs_diff"] = max_diff
        if latencies:
            report["latency_ms"] = {
                "p50": round(float(np.percentile(latencies, 50)), 2),
                "p99": round(float(np.percentile(latencies, 99)), 2),
                "max": round(max(latencies), 2),
            }
            if report["latency_ms"]["p99"] > max_latency_ms:
                reasons.append(f"p99 latency {report['latency_ms']['p99']} ms exceeds the budget of {max_latency_ms} ms")
        if max_diff > 1e-4:
            reasons.append(f"served answers differ from the SavedModel's by up to {max_diff:.2g}")
        if compare:
            report["performance"] = _performance(report, latencies, baseline_latencies, saved_model_dir,
                                                 baseline_dir, training_rates, performance_settings)
            reasons.extend(f"computing performance regressed: {r}" for r in report["performance"]["refusals"])
            for warning in report["performance"]["warnings"]:
                logger.warning("serving check: computing performance: %s", warning)
        return _finish(out_dir, report, reasons, log_path)
    finally:
        _stop(proc)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(baseline_base, ignore_errors=True)


# The baseline's name in the check server, beside the candidate's.
BASELINE_SUFFIX = "-baseline"


def _two_models_config(out_dir: str, model_name: str, candidate_base: str, baseline_base: str) -> str:
    """A models.config serving the candidate and, as `<name>-baseline`, its baseline."""
    from serving.repository import model_config

    config = model_config.single_model(model_name, candidate_base)
    other = model_config.single_model(model_name + BASELINE_SUFFIX, baseline_base)
    config.model_config_list.config.extend(other.model_config_list.config)
    path = os.path.join(out_dir, "models.config")
    model_config.write(config, path)
    return path


def _timed(url: str, body: dict) -> float:
    t0 = time.perf_counter()
    _http(url, body)
    return (time.perf_counter() - t0) * 1000


def _performance(report: dict, latencies: list[float], baseline_latencies: list[float], saved_model_dir: str,
                 baseline_dir: str, training_rates: tuple, settings: performance.PerformanceSettings) -> dict:
    """The candidate's computing figures against the baseline's (performance.compare)."""
    def figures(lat: list[float], model_dir: str, rate) -> dict:
        return {performance.LATENCY_P50: round(float(np.percentile(lat, 50)), 2) if lat else None,
                performance.LATENCY_P99: round(float(np.percentile(lat, 99)), 2) if lat else None,
                performance.SIZE: performance.saved_model_bytes(model_dir),
                performance.TRAINING: rate}

    out = performance.compare(figures(latencies, saved_model_dir, training_rates[0]),
                              figures(baseline_latencies, baseline_dir, training_rates[1]), settings)
    out["requests_each"] = len(latencies)
    if report.get("baseline_error"):
        out["not_compared"]["latency"] = report["baseline_error"]
    return out


def _grpc_check(port, model_name, signature, input_key, examples, expected, reasons) -> float:
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = model_name, signature
    request.inputs[input_key].CopyFrom(tf.make_tensor_proto(np.array(examples, dtype=object)))
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            response = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
        except grpc.RpcError as e:
            reasons.append(f"gRPC Predict failed: {e.code().name}: {e.details()}")
            return 0.0
    from serving.server import tensors

    outputs = {k: tf.make_ndarray(v) for k, v in response.outputs.items()}
    return float(np.abs(_rows(tensors.to_row_format(outputs)) - expected).max())


def _finish(out_dir: str, report: dict, reasons: list[str], log_path: str | None = None) -> dict:
    report["passed"] = not reasons
    report["reasons"] = reasons
    if log_path:
        report["server_log"] = log_path
    write_text(os.path.join(out_dir, REPORT_FILENAME), json.dumps(report, indent=2, sort_keys=True))
    return report


def run(model, examples, blessing, model_name: str, num_requests: int, max_latency_ms: float, split: str,
        signing_key: str, signing_workdir: str, baseline=None, performance_json: str = "{}") -> None:
    """The node's work: the check of the candidate (beside its baseline, when there is
    one), its verdict on the InfraBlessing."""
    from serving.repository import signing
    from trainer_toolkit import provenance

    files = sorted(glob.glob(os.path.join(examples.uri, f"Split-{split}", "*")))
    key = signing.resolve_key(signing_key or None, signing_workdir) if signing_workdir else None
    settings = performance.PerformanceSettings.from_dict(json.loads(performance_json or "{}"), "performance")
    candidate_dir = os.path.join(model.uri, "Format-Serving")
    baseline_dir = os.path.join(baseline.uri, "Format-Serving") if baseline is not None else None
    if baseline_dir is not None and not os.path.exists(os.path.join(baseline_dir, "saved_model.pb")):
        logger.warning("serving check: the baseline %s has no SavedModel: computing performance not compared",
                       baseline_dir)
        baseline_dir = None

    def rate(path):
        record = provenance.read(path) if path else None
        return (record or {}).get("examples_per_sec") or None

    report = run_check(
        candidate_dir, files, model_name, blessing.uri,
        num_requests=num_requests, max_latency_ms=max_latency_ms, sign_with=key,
        baseline_dir=baseline_dir, performance_settings=settings,
        training_rates=(rate(candidate_dir), rate(baseline_dir)),
    )
    blessing.set_int_custom_property("blessed", 1 if report["passed"] else 0)
    # Marker files as InfraValidator writes them, for tools that look for those.
    open(os.path.join(blessing.uri, "INFRA_BLESSED" if report["passed"] else "INFRA_NOT_BLESSED"), "w").close()
    if report["passed"]:
        logger.info("serving check passed: %s", report)
    else:
        logger.warning("serving check FAILED, the model will not be pushed: %s", "; ".join(report["reasons"]))
