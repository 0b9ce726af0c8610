"""Prometheus metrics of the local server (served at /metrics and TF Serving's
/monitoring/prometheus/metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "retrain_serving_requests", "Requests by model, API and outcome.",
            ["model", "api", "code"], registry=self.registry,
        )
        self.latency = Histogram(
            "retrain_serving_request_latency_seconds", "Request latency, parsing to response.",
            ["model", "api"], registry=self.registry,
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5),
        )
        self.batch_rows = Histogram(
            "retrain_serving_batch_rows", "Rows per model call (after server-side batching).",
            ["model"], registry=self.registry, buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
        )
        self.version_available = Gauge(
            "retrain_serving_model_version_available", "1 while a version is AVAILABLE.",
            ["model", "version"], registry=self.registry,
        )
        self.load_failures = Counter(
            "retrain_serving_load_failures", "Versions that failed to load.", ["model"], registry=self.registry,
        )
        self.signature_refusals = Counter(
            "retrain_serving_signature_refusals",
            "Versions refused by --require-signed: unsigned, an untrusted signer, or files that differ from the signature.",
            ["model", "version"], registry=self.registry,
        )

        self.request_logs = Counter(
            "retrain_serving_request_logs", "Sampled request logs: written, dropped (writer behind) or failed.",
            ["model", "outcome"], registry=self.registry,
        )
        self._counters: dict[tuple, object] = {}
        self._histograms: dict[tuple, object] = {}

    def request_done(self, model: str, api: str, code: str, seconds: float) -> None:
        """Counts one request and its latency (label children kept: `labels()` takes a lock
        and builds a key on every call)."""
        key = (model, api, code)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.requests.labels(model, api, code)
        histogram = self._histograms.get(key[:2])
        if histogram is None:
            histogram = self._histograms[key[:2]] = self.latency.labels(model, api)
        counter.inc()
        histogram.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
