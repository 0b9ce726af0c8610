"""ApprovalGate: an optional human decision between the serving check and the push.

Reads the decision recorded for this candidate (`retrain approve`, or Airflow's
human-in-the-loop task) and records it on its `ModelApproval` output in MLMD (decision,
reviewer, comment, time). Without a decision it stops the run ("awaiting approval"); the
Pusher runs only under `approved == 1`, so a rejection means no push.
"""

import logging

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact
from tfx.types.standard_artifacts import Model

from governance import approval as approvals

logger = logging.getLogger(__name__)


class ModelApproval(artifact.Artifact):
    """A human decision about one candidate model."""

    TYPE_NAME = "ModelApproval"


@component
def ApprovalGate(
    model: InputArtifact[Model],
    approval: OutputArtifact[ModelApproval],
    pipeline_root: Parameter[str],
) -> None:
    """Records the reviewer's decision on this candidate, or stops until there is one."""
    decision = approvals.read(pipeline_root, model.id)
    if decision is None:
        raise approvals.ApprovalPending(
            f"awaiting approval of model {model.id}: retrain approve --model-id {model.id} "
            f"--decision approve|reject --reviewer NAME [--comment TEXT], then run again",
            model.id,
        )
    approval.set_int_custom_property("approved", int(decision["decision"] == "approve"))
    for key in ("decision", "reviewer", "comment", "decided_at", "source"):
        approval.set_string_custom_property(key, str(decision.get(key) or ""))
    approval.set_int_custom_property("model_id", model.id)
    logger.info("model %d %sd by %s", model.id, decision["decision"], decision["reviewer"])
