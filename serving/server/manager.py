"""Which model versions are served: polls each model's base path, loads new versions while
the old ones keep answering, then unloads them (availability first, as TF Serving does).

A version directory is considered only when it holds a complete SavedModel; one that
fails to load (or to answer its warm-up requests) is reported in the model's status and
not retried until its directory changes, and the versions already serving stay.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
from concurrent.futures import Executor, Future

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import prediction_log_pb2

from core import feature_policy
from serving.errors import InvalidArgument, NotFound, ServingError
from serving.repository import model_config, signing, versions
from serving.repository.base_path import discover
from serving.server import batching, request_log
from serving.server.batching import Batcher, BatchOptions
from serving.server.metrics import Metrics
from serving.server.routing import to_canary

logger = logging.getLogger(__name__)

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
DEFAULT_SIGNATURE = "serving_default"


def _signature_defs(path: str) -> dict:
    """Every SignatureDef of the MetaGraph, `__saved_model_init_op` included: TF Serving's
    GetModelMetadata lists them all (servables/tensorflow/get_model_metadata_impl.cc)."""
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    return dict(proto.meta_graphs[0].signature_def.items())


_OP_SUFFIX = re.compile(r"\s*\[Op:[^\]]*\]\s*$")


def runtime_message(message: str) -> str:
    """The op's own error, as TF Serving's Session::Run returns it: eager TF wraps it as
    "Graph execution error:\n\nDetected at node N defined at (most recent call last):\n<stack>\n
    <the op's message>\n\t [[{{node N}}]] [Op:__inference_...]"; keep the op's message and its node."""
    message = _OP_SUFFIX.sub("", message)
    if not message.startswith("Graph execution error:"):
        return message.strip()
    node = message.find("\n\t [[")
    if node < 0:
        return message.strip().splitlines()[-1]
    start = message.rfind("\n", 0, node) + 1
    return message[start:].strip("\n")


@dataclasses.dataclass
class VersionStatus:
    state: str  # START, LOADING, AVAILABLE, UNLOADING, END (GetModelStatus' states)
    error_code: str = "OK"
    error_message: str = ""


class Servable:
    """One loaded model version: its signatures, callable with numpy inputs."""

    def __init__(self, name: str, version: int, path: str, batch: BatchOptions, metrics: Metrics | None):
        self.name, self.version, self.path = name, version, path
        self.signature_defs = _signature_defs(path)
        # The rules its request logs follow (core/feature_policy.py); None: it carries none.
        self.feature_policy = feature_policy.from_model(path)
        if self.feature_policy is not None and self.feature_policy.needs_hash_key:
            try:
                feature_policy.hash_key()
            except feature_policy.PolicyError as e:
                logger.error("%s version %d: its request logs will not be written: %s", name, version, e)
        self._loaded = tf.saved_model.load(path)
        # What requests can call: the serving signatures, not the internal `__...` ones.
        self._functions = {k: self._loaded.signatures[k] for k in self.signature_defs if not k.startswith("__")}
        # Read on every request: built once (structured_input_signature and TensorShape
        # comparisons cost more than the rest of a small request's Python).
        self._specs = {k: dict(fn.structured_input_signature[1]) for k, fn in self._functions.items()}
        self._dims = {k: {name: None if spec.shape.rank is None else tuple(spec.shape.as_list())
                          for name, spec in specs.items()} for k, specs in self._specs.items()}
        self._batchers: dict[str, Batcher] = {}
        self._batch, self._metrics = batch, metrics
        self._lock = threading.Lock()

    def signature(self, name: str | None):
        """(name, SignatureDef) of a predict request's signature, resolved as TF Serving's REST
        handler resolves it before reading the inputs (http_rest_api_handler.cc GetInfoMap).

        Raises:
          InvalidArgument: no such signature.
        """
        name = name or DEFAULT_SIGNATURE
        if name not in self._functions:
            raise InvalidArgument(f"Serving signature name: \"{name}\" not found in signature def")
        return name, self.signature_defs[name]

    def input_specs(self, signature: str) -> dict[str, tf.TensorSpec]:
        """The signature's inputs by name (shared: not to be changed by the caller)."""
        return self._specs[signature]

    def accepts_shape(self, signature: str, name: str, shape: tuple) -> bool:
        """TensorShape.is_compatible_with: same rank, and equal wherever the spec fixes a size."""
        dims = self._dims[signature][name]
        return dims is None or (len(dims) == len(shape) and all(d is None or d == n for d, n in zip(dims, shape)))

    def run(self, signature: str, inputs: dict[str, np.ndarray], output_filter=()) -> dict[str, np.ndarray]:
        """Runs a signature (batched with concurrent requests).

        Raises:
          InvalidArgument: inputs the graph rejects, or an unknown output in `output_filter`.
        """
        return self.submit(signature, inputs, output_filter).result()

    def submit(self, signature: str, inputs: dict[str, np.ndarray], output_filter=(),
               executor: Executor | None = None) -> Future:
        """`run`, as a Future of the outputs (gRPC answers when it is done, holding no thread);
        a request the batcher cannot batch runs on `executor` (without one, now).

        Raises:
          InvalidArgument: an unknown or repeated output in `output_filter` (at once).
        """
        with self._lock:
            batcher = self._batchers.get(signature)
            if batcher is None:
                batcher = self._batchers[signature] = Batcher(
                    lambda x, fn=self._functions[signature]: self._call(fn, x),
                    self._batch,
                    on_batch=(lambda rows: self._metrics.batch_rows.labels(self.name).observe(rows))
                    if self._metrics else (lambda rows: None),
                )
        seen: set[str] = set()
        known = self.signature_defs[signature].outputs
        for alias in output_filter:  # predict_util.cc PreProcessPrediction, before running
            if alias not in known:
                raise InvalidArgument(f"output tensor alias not found in signature: {alias} Outputs expected to be "
                                      f"in the set {{{','.join(sorted(known))}}}.")
            if alias in seen:
                raise InvalidArgument(f"duplicate output tensor alias: {alias}")
            seen.add(alias)
        future = batcher.submit(inputs, executor)
        if not seen:
            return future
        return batching.derived(future, lambda outputs: {k: v for k, v in outputs.items() if k in seen})

    @staticmethod
    def _call(fn, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            result = fn(**{k: tf.constant(v) for k, v in inputs.items()})
        except tf.errors.InvalidArgumentError as e:
            raise InvalidArgument(runtime_message(e.message)) from e
        except (ValueError, TypeError) as e:
            raise InvalidArgument(str(e).strip().splitlines()[0][:500]) from e
        return {k: v.numpy() for k, v in result.items()}

    def examples_signature(self, name: str | None, method: str) -> tuple[str, str]:
        """(signature, its serialized-examples input) for classify/regress, checked as TF
        Serving checks it (servables/tensorflow/classifier.cc GetClassificationSignatureDef and
        PreProcessClassification; regressor.cc likewise).

        Raises:
          InvalidArgument: no such signature, another method, or not TF Serving's
            one-input/`classes`-`scores`/`outputs` shape.
        """
        name = name or DEFAULT_SIGNATURE
        if name not in self._functions:
            raise InvalidArgument(f"No signature was found with the name: {name}")
        sig = self.signature_defs[name]
        kind = "classification" if method == tf.saved_model.CLASSIFY_METHOD_NAME else "regression"
        if sig.method_name != method:
            raise InvalidArgument(f"Expected {kind} signature method_name to be {method}. Was: {sig.method_name}")
        if len(sig.inputs) != 1:
            raise InvalidArgument("Expected one input Tensor.")
        text = text_format.MessageToString(sig)
        if kind == "classification":
            if len(sig.outputs) not in (1, 2):
                raise InvalidArgument(f"Expected one or two output Tensors, found {len(sig.outputs)}")
            if tf.saved_model.CLASSIFY_INPUTS not in sig.inputs:
                raise InvalidArgument(f"No classification inputs found in SignatureDef: {text}")
            if not {tf.saved_model.CLASSIFY_OUTPUT_CLASSES, tf.saved_model.CLASSIFY_OUTPUT_SCORES} & set(sig.outputs):
                raise InvalidArgument("Expected classification signature outputs to contain at least one of "
                                      f"\"classes\" or \"scores\". Signature was: {text}")
            return name, tf.saved_model.CLASSIFY_INPUTS
        if len(sig.outputs) != 1:
            raise InvalidArgument("Expected one output Tensor.")
        if tf.saved_model.REGRESS_INPUTS not in sig.inputs:
            raise InvalidArgument(f"No regression inputs found in SignatureDef: {text}")
        if tf.saved_model.REGRESS_OUTPUTS not in sig.outputs:
            raise InvalidArgument(f"No regression outputs found in SignatureDef: {text}")
        return name, tf.saved_model.REGRESS_INPUTS

    def warm_up(self) -> int:
        """Replays `assets.extra/tf_serving_warmup_requests`; returns how many ran.

        Raises:
          ServingError: a warm-up request failed (the version is then not served).
        """
        path = os.path.join(self.path, WARMUP_FILE)
        if not os.path.exists(path):
            return 0
        count = 0
        for record in tf.data.TFRecordDataset(path):
            log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            kind = log.WhichOneof("log_type")
            if kind == "predict_log":
                request = log.predict_log.request
                signature, _ = self.signature(request.model_spec.signature_name)
                self.run(signature, {k: tf.make_ndarray(v) for k, v in request.inputs.items()})
            elif kind in ("classify_log", "regress_log"):
                request = getattr(log, kind).request
                method = tf.saved_model.CLASSIFY_METHOD_NAME if kind == "classify_log" else tf.saved_model.REGRESS_METHOD_NAME
                signature, key = self.examples_signature(request.model_spec.signature_name, method)
                examples = [e.SerializeToString() for e in request.input.example_list.examples]
                self.run(signature, {key: np.array(examples, dtype=object)})
            count += 1
        return count

    def close(self) -> None:
        # Requests already holding this servable finish first.
        for batcher in self._batchers.values():
            threading.Timer(10.0, batcher.close).start()


def _desired(policy, available: list[int]) -> set[int]:
    kind = policy.WhichOneof("policy_choice") or "latest"
    if kind == "all":
        return set(available)
    if kind == "specific":
        return set(policy.specific.versions) & set(available)
    n = policy.latest.num_versions or 1
    return set(sorted(available)[-n:])


class ModelManager:
    """Loads, serves and unloads the versions a ModelServerConfig asks for."""

    def __init__(
        self,
        config: model_config.ModelServerConfig,
        config_path: str | None = None,
        poll_seconds: float = 1.0,
        batch: BatchOptions = BatchOptions(),
        metrics: Metrics | None = None,
        log_limits: request_log.LogLimits = request_log.LogLimits(),
        trusted_keys: tuple[str, ...] = (),
    ):
        """`trusted_keys`: where given, a version loads only if its signature verifies with
        one of these public keys and its files are the signed ones (serving/repository/signing.py);
        a refused version is tried again when it or its signature changes.

        Raises InvalidArgument: a model's logging_config is not one this server can write."""
        self._config, self._config_path = config, config_path
        self._poll_seconds, self._batch, self._metrics = poll_seconds, batch, metrics
        self._lock = threading.Lock()
        self._served: dict[str, dict[int, Servable]] = {}
        self._status: dict[str, dict[int, VersionStatus]] = {}
        self._failed: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log_limits = log_limits
        self._trusted_keys = tuple(trusted_keys)
        self._loggers: dict[str, tuple[bytes, request_log.RequestLogger]] = {}
        # model -> (stable, canary, canary share) while a canary rollout is under test.
        self._splits: dict[str, tuple[int, int, float]] = {}
        self._sync_loggers(config)

    # -- polling -------------------------------------------------------------------
    def start(self) -> None:
        self.poll_once()
        self._thread = threading.Thread(target=self._loop, name="model-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        for _, request_logger in self._loggers.values():
            request_logger.close()

    def request_logger(self, name: str) -> request_log.RequestLogger | None:
        """The model's request log, if its logging_config asks for one."""
        entry = self._loggers.get(name)
        return entry[1] if entry else None

    def _sync_loggers(self, config: model_config.ModelServerConfig) -> None:
        """One RequestLogger per model with a logging_config; a changed config gets a new one.

        Raises:
          InvalidArgument: a logging_config this server cannot write (nothing changes then).
        """
        wanted = {m.name: m.logging_config for m in config.model_config_list.config
                  if m.HasField("logging_config") and m.logging_config.sampling_config.sampling_rate > 0}
        for name, logging_config in wanted.items():
            request_log.check(name, logging_config)
        for name in list(self._loggers):
            if name not in wanted or wanted[name].SerializeToString(deterministic=True) != self._loggers[name][0]:
                self._loggers.pop(name)[1].close()
        for name, logging_config in wanted.items():
            if name not in self._loggers:
                self._loggers[name] = (logging_config.SerializeToString(deterministic=True),
                                       request_log.RequestLogger(name, logging_config, self._log_limits, self._metrics))

    def _loop(self) -> None:
        while not self._stop.wait(self._poll_seconds):
            try:
                self.poll_once()
            except Exception:
                logger.exception("model poll failed; serving continues with what is loaded")

    def _reload_config(self) -> None:
        if self._config_path:
            try:
                config = model_config.load(self._config_path)
                self._sync_loggers(config)
                self._config = config
            except ServingError as e:
                logger.error("keeping the previous model config: %s", e)

    def poll_once(self) -> None:
        self._reload_config()
        for model in self._config.model_config_list.config:
            self._poll_model(model)

    def _sync_split(self, model) -> None:
        """The canary split of a model: its rollout file, where models.config labels both
        versions it names (a stale or foreign file splits nothing)."""
        try:
            state = versions.rollout_state(model.base_path)
        except ServingError as e:
            logger.error("%s: no traffic split: %s", model.name, e)
            state = None
        labels = dict(model.version_labels)
        if (state is not None and labels.get(versions.STABLE) == state["stable"]
                and labels.get(versions.CANARY) == state["canary"]):
            split = (state["stable"], state["canary"], float(state["canary_share"]))
            if self._splits.get(model.name) != split:
                logger.info("%s: %.0f%% of unlabelled requests go to canary version %d, the rest to stable %d",
                            model.name, 100 * split[2], split[1], split[0])
            self._splits[model.name] = split
        elif self._splits.pop(model.name, None) is not None:
            logger.info("%s: traffic split ended", model.name)

    def split(self, name: str) -> tuple[int, int, float] | None:
        """(stable, canary, share) of a model under a canary rollout, else None."""
        return self._splits.get(name)

    def _poll_model(self, model) -> None:
        name = model.name
        self._sync_split(model)
        found = discover(model.base_path)
        with self._lock:
            served = dict(self._served.get(name, {}))
        for key in [k for k in self._failed if k[0] == name]:
            path = found.get(key[1])
            if path is None or self._stamp(path) != self._failed[key]:
                del self._failed[key]  # changed or gone: may be tried again
        candidates = [v for v in found if (name, v) not in self._failed]
        for version in sorted(_desired(model.model_version_policy, candidates) - set(served), reverse=True):
            servable = self._load(name, version, found[version])
            if servable is not None:
                served[version] = servable
        loadable = [v for v in candidates if (name, v) not in self._failed]
        desired = _desired(model.model_version_policy, loadable)
        retired = [v for v in served if v not in desired]
        with self._lock:
            self._served[name] = {v: s for v, s in served.items() if v in desired}
            for v in self._served[name]:
                self._set_status(name, v, VersionStatus("AVAILABLE"))
        for version in retired:
            self._set_status(name, version, VersionStatus("UNLOADING"))
            served[version].close()
            self._set_status(name, version, VersionStatus("END"))
            logger.info("unloaded %s version %d", name, version)

    def _stamp(self, path: str):
        return signing.stamp(path) if self._trusted_keys else os.path.getmtime(path)

    def _load(self, name: str, version: int, path: str) -> Servable | None:
        self._set_status(name, version, VersionStatus("LOADING"))
        start = time.perf_counter()
        if self._trusted_keys:
            try:
                signed = signing.verify_version(path, list(self._trusted_keys))
            except signing.SignatureError as e:
                self._failed[(name, version)] = self._stamp(path)
                message = f"version {version} refused: {e}"
                logger.error("%s %s", name, message)
                self._set_status(name, version, VersionStatus("END", "FAILED_PRECONDITION", message))
                if self._metrics:
                    self._metrics.signature_refusals.labels(name, str(version)).inc()
                return None
            logger.info("%s version %d: signature %s by key %s verified", name, version, signed["digest"],
                        signed["key_id"][:16])
        try:
            servable = Servable(name, version, path, self._batch, self._metrics)
            warmed = servable.warm_up()
        except Exception as e:  # noqa: BLE001  any load failure is reported, never fatal
            self._failed[(name, version)] = self._stamp(path)
            message = f"version {version} failed to load: {type(e).__name__}: {str(e).strip()[:400]}"
            logger.error("%s %s", name, message)
            self._set_status(name, version, VersionStatus("END", "UNKNOWN", message))
            if self._metrics:
                self._metrics.load_failures.labels(name).inc()
            return None
        logger.info("loaded %s version %d in %.1f s (%d warm-up requests)", name, version,
                     time.perf_counter() - start, warmed)
        return servable

    def _set_status(self, name: str, version: int, status: VersionStatus) -> None:
        self._status.setdefault(name, {})[version] = status
        if self._metrics:
            self._metrics.version_available.labels(name, str(version)).set(1 if status.state == "AVAILABLE" else 0)

    # -- lookups --------------------------------------------------------------------
    def model_names(self) -> list[str]:
        return [m.name for m in self._config.model_config_list.config]

    def labels(self, name: str) -> dict[str, int]:
        model = model_config.find(self._config, name)
        return dict(model.version_labels) if model else {}

    def resolve_version(self, name: str, version: int | None = None, label: str | None = None) -> int | None:
        if label is not None:
            labels = self.labels(name)
            if label not in labels:
                # InvalidArgument, as TF Serving's ServerCore::GetModelVersionForLabel says it.
                raise InvalidArgument(f"Unrecognized servable version label: {label}")
            return labels[label]
        return version

    def get(self, name: str, version: int | None = None, label: str | None = None,
            key: str | None = None) -> Servable:
        """The servable for a request: a version, a label's version, or the latest; under a
        canary rollout a request naming neither goes to the canary for a `canary_share` of
        request keys (deterministic in `key`) and to `stable` otherwise.

        Raises:
          NotFound: unknown model, version or label, or nothing loaded yet.
        """
        if model_config.find(self._config, name) is None:
            raise NotFound(f"Servable not found for request: Latest({name})")
        version = self.resolve_version(name, version, label)
        with self._lock:
            served = self._served.get(name, {})
            if version is None and key is not None and name in self._splits:
                stable, canary, share = self._splits[name]
                chosen = canary if to_canary(key, share) else stable
                if chosen in served:
                    return served[chosen]
                if stable in served:
                    return served[stable]
            if version is None:
                if not served:
                    raise NotFound(f"Servable not found for request: Latest({name})")
                return served[max(served)]
            if version not in served:
                raise NotFound(f"Servable not found for request: Specific({name}, {version})")
            return served[version]

    def status(self, name: str, version: int | None = None, label: str | None = None) -> list[tuple[int, VersionStatus]]:
        """GetModelStatus: every version this server has seen, or one.

        Raises:
          NotFound: unknown model, version or label.
        """
        if name not in self.model_names():
            raise NotFound(f"Could not find any versions of model {name}")
        version = self.resolve_version(name, version, label)
        statuses = dict(self._status.get(name, {}))
        if version is not None:
            if version not in statuses:
                raise NotFound(f"Could not find version {version} of model {name}")
            return [(version, statuses[version])]
        if not statuses:
            raise NotFound(f"Could not find any versions of model {name}")
        return sorted(statuses.items(), reverse=True)

    def served_versions(self, name: str) -> list[int]:
        with self._lock:
            return sorted(self._served.get(name, {}))

