"""The data gate's decision on a span folder, offline: what the pipeline's DataGate would decide.

For the gate's benchmark and tests, and for trying a policy on data before a run: a span
folder is encoded as CsvExampleGen's engine would (or read as TFRecords), profiled as
StatisticsGen profiles it, validated against the schema as ExampleValidator does, and
judged by the same `scan_rows` + `evaluate_gate` the component runs, against a baseline
month and the label reference of the months before it, as if those had passed the gate.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile

from components.data_gate import calibration, rows
from components.data_gate import consistency as consistency_lib
from components.data_gate import policy as policy_lib
from components.data_gate.component import evaluate_gate, scan_rows
from core import spans


@dataclasses.dataclass
class Judge:
    """Judges spans against real months of `data_root` (their statistics and label facts cached)."""

    data_root: str
    example_format: str
    schema: object
    policy: policy_lib.GatePolicy
    consistency: consistency_lib.SpanConsistency | None = None
    # {"fn", "name", "kind"} of the pipeline's label, or None.
    label: dict | None = None

    def __post_init__(self):
        self._months: dict[int, tuple] = {}
        self._new_values: dict[int, dict] = {}

    @classmethod
    def for_config(cls, config, policy: policy_lib.GatePolicy | None = None) -> Judge:
        """A judge with a pipeline config's schema, policy (or `policy`), consistency and label."""
        from pipelines import config as config_lib
        from runner import preflight

        return cls(config.data_root, config.example_format, preflight.load_schema(config.schema_path),
                   policy or config_lib.load_gate_policy(config),
                   config.consistency_settings if config.consistency_settings.enabled else None,
                   {"fn": config.label_function, "name": config.label_key, "kind": config.label_kind})

    @property
    def reference_spans(self) -> int:
        return int((self.policy.label or {}).get("reference_spans") or 6)

    def month(self, span: int) -> tuple:
        """(statistics, label facts or None) of a real month."""
        if span not in self._months:
            label = (self.label["fn"], self.label["kind"]) if self.label else None
            scan = calibration.span_scan(spans.span_dir(self.data_root, span), self.example_format, self.schema, span,
                                         label=label)
            self._months[span] = (scan.statistics[0].result(), scan.label.facts() if scan.label else None)
        return self._months[span]

    def baseline_report(self, span: int) -> dict:
        """What the report of the month before `span` would carry if the months before it had
        passed: the label reference, and the values the months since calibration added to
        the value sets."""
        months = spans.list_spans(self.data_root)
        before = [s for s in months if s < span][-self.reference_spans:]
        reference = [dict(self.month(s)[1], span=s) for s in before if self.month(s)[1] is not None]
        calibrated = str((self.policy.calibration or {}).get("spans") or "")
        last = int(calibrated.split("..")[-1]) if calibrated else span
        accepted: dict = {}
        for s in (m for m in months if last < m < span):
            for name, values in self._new_values_of(s).items():
                accepted[name] = sorted({*accepted.get(name, []), *values}, key=str)
        return {"row_checks": {"label": {"next_reference": reference}, "accepted_values": accepted}}

    def _new_values_of(self, span: int) -> dict:
        """A real month's values outside the calibrated value sets."""
        if span not in self._new_values:
            with tempfile.TemporaryDirectory() as tmp:
                files = rows.span_examples(spans.span_dir(self.data_root, span), self.example_format, tmp)
                facts = scan_rows(files, self.schema, self.policy, None, None, span, None)
            self._new_values[span] = {name: c["new_values"] for name, c in facts["domains"].items()
                                      if c.get("new_values")}
        return self._new_values[span]

    def judge(self, folder: str, span: int, baseline_span: int | None) -> dict:
        """The gate's report on the span folder (`span` names its month), against `baseline_span`."""
        import tensorflow_data_validation as tfdv

        # A real month of data_root has its statistics in the cache already, or soon (it is the
        # next month's baseline): the same TFDV statistics, computed once.
        real = os.path.realpath(folder) == os.path.realpath(spans.span_dir(self.data_root, span))
        with tempfile.TemporaryDirectory() as tmp:
            files = rows.span_examples(folder, self.example_format, tmp)
            stats = (self.month(span)[0] if real
                     else rows.SpanScan(None, statistics_seed=span).scan(files).statistics[0].result())
            facts = scan_rows(files, self.schema, self.policy, self.consistency, self.label, span,
                              self.baseline_report(span))
        anomalies = {"train": tfdv.validate_statistics(stats, self.schema)}
        baseline = self.month(baseline_span)[0] if baseline_span else None
        return evaluate_gate(stats, self.schema, anomalies, baseline, self.policy, baseline_span, facts, span)

