"""How a run ended, and the exit code each ending gives: one ladder for every reader.

`governance.record.classify` decides the outcome from a run's record; the CLI summary,
the governance report, `retrain models` and the exit code all take it from there.
"""

from __future__ import annotations

import dataclasses

from core import exit_codes

PUSHED = "pushed"
NOT_BLESSED = "not_blessed"
FAILED_SERVING_CHECK = "failed_serving_check"
REJECTED = "rejected"
NOT_PUSHED = "not_pushed"  # finished without a push for another reason (e.g. a skipped Pusher)
STOPPED_BY_DATA_GATE = "stopped_by_data_gate"
STOPPED_BY_SERVING_SKEW = "stopped_by_serving_skew"  # serving_skew.action: block
AWAITING_APPROVAL = "awaiting_approval"
FAILED_BACKFILLING = "failed_backfilling"
FAILED_AT = "failed_at_"  # + the node id that did not finish

# A candidate that reached a check and was refused: operators are told (airflow_tfx/alerts.py).
REFUSED = (NOT_BLESSED, FAILED_SERVING_CHECK, REJECTED)
# What `retrain summary --outcome-line` prints for an orchestrator.
OUTCOME_LINE_KEYS = ("pipeline", "run_id", "span", "outcome", "reason", "report", "stale", "runtime_changed")

# A candidate refused by a check is a finished run (exit 0); a node that did not finish is not.
_EXIT_CODES = {
    PUSHED: exit_codes.OK, NOT_BLESSED: exit_codes.OK, FAILED_SERVING_CHECK: exit_codes.OK,
    REJECTED: exit_codes.OK, NOT_PUSHED: exit_codes.OK,
    STOPPED_BY_DATA_GATE: exit_codes.GATE_STOPPED, STOPPED_BY_SERVING_SKEW: exit_codes.GATE_STOPPED,
    AWAITING_APPROVAL: exit_codes.AWAITING_APPROVAL,
    FAILED_BACKFILLING: exit_codes.FAILED,
}


@dataclasses.dataclass(frozen=True)
class Outcome:
    """`name` is what reports and `--json` print; `reason` says why nothing was pushed."""

    name: str
    reason: str | None = None

    @classmethod
    def failed_at(cls, node_id: str, reason: str | None = None) -> Outcome:
        return cls(FAILED_AT + node_id, reason)

    @property
    def pushed(self) -> bool:
        return self.name == PUSHED

    @property
    def exit_code(self) -> int:
        return exit_code(self.name)


def exit_code(name: str) -> int:
    """The CLI exit code of an outcome name.

    Raises:
      ValueError: not an outcome name.
    """
    if name.startswith(FAILED_AT):
        return exit_codes.FAILED
    if name not in _EXIT_CODES:
        raise ValueError(f"unknown run outcome {name!r}")
    return _EXIT_CODES[name]
