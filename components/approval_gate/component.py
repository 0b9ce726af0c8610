"""ApprovalGate: an optional human decision between the serving check and the push.

Reads the decision recorded for this candidate (`retrain approve`, or Airflow's
human-in-the-loop task) and records it on its `ModelApproval` output in MLMD (decision,
reviewer, comment, time). Without a decision it stops the run ("awaiting approval"); the
Pusher runs only under `approved == 1`, so a rejection means no push.
"""

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types import artifact
from tfx.types.standard_artifacts import Model

from components.approval_gate import executor


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
    executor.record(model, approval, pipeline_root)
