"""What one pipeline node did, and how it travels from the TFX runtime to its caller.

`retrain node run` prints the result as its last stdout line, `RESULT {json}`; the Airflow
operator (another Python, no TFX) reads it with `parse_result_line`. The run folder keeps
the same JSON in `nodes/<node id>.json`.
"""

from __future__ import annotations

import dataclasses
import json

RESULT_PREFIX = "RESULT "
# Node statuses, as the runner reports them.
COMPLETE, CACHED, SKIPPED, FAILED = "complete", "cached", "skipped", "failed"
STATUSES = (COMPLETE, CACHED, SKIPPED, FAILED)


@dataclasses.dataclass(frozen=True)
class NodeResult:
    """What one node did. `status` is complete, cached, skipped or failed."""

    node_id: str
    status: str
    execution_id: int | None = None
    # Output key -> artifacts as {"id": MLMD artifact id, "uri": ...}.
    outputs: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    inputs: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None
    # Set when the data gate refused the span (a verdict on the data, not a crash).
    gate_stopped: bool = False
    gate_report: str | None = None
    approval_pending: bool = False
    # Where it ran: the worker's name (RETRAIN_WORKER_NAME, e.g. a Celery worker) or the host.
    worker: str | None = None
    # What it cost (core/cost.py): cpu_seconds, peak_rss_mb, accelerator_seconds, energy_j, energy_method.
    cost: dict | None = None

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"node {self.node_id}: status {self.status!r} is not one of {STATUSES}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeResult:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def output_uri(self, key: str) -> str | None:
        arts = self.outputs.get(key) or []
        return arts[0]["uri"] if arts else None


def result_line(result: NodeResult) -> str:
    """The machine-readable line a node command prints last."""
    return RESULT_PREFIX + result.to_json()


def parse_result_line(line: str) -> NodeResult | None:
    """The result a `RESULT ` line carries, or None for any other line."""
    line = line.rstrip("\n")
    if not line.startswith(RESULT_PREFIX):
        return None
    return NodeResult.from_json(line[len(RESULT_PREFIX):])
