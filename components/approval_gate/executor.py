"""ApprovalGate's work: the recorded decision on a candidate, onto its ModelApproval."""

import logging

from governance import approval as approvals

logger = logging.getLogger(__name__)


def record(model, approval, pipeline_root: str) -> None:
    """Records the reviewer's decision on `model` on `approval`.

    Raises:
      approvals.ApprovalPending: no decision yet (the run stops, awaiting approval).
    """
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
