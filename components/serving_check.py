"""ServingCheck: the candidate must serve, correctly and fast enough, before it is pushed.

A Python-function component producing TFX's standard `InfraBlessing` (custom property
`blessed`, as InfraValidator sets it), which the Pusher checks; the report
(`serving_check.json`) and the warm-up requests the Pusher ships live in the blessing's
folder. The work is in `serving/check.py`.
"""

import glob
import logging
import os

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types.standard_artifacts import Examples, InfraBlessing, Model

from serving import check, signing

logger = logging.getLogger(__name__)


@component
def ServingCheck(
    model: InputArtifact[Model],
    examples: InputArtifact[Examples],
    blessing: OutputArtifact[InfraBlessing],
    model_name: Parameter[str],
    num_requests: Parameter[int] = 20,
    max_latency_ms: Parameter[float] = 500.0,
    split: Parameter[str] = "eval",
    signing_key: Parameter[str] = "",
    signing_workdir: Parameter[str] = "",
) -> None:
    """Serves the candidate in a separate `retrain serve` process and checks its answers.
    With `signing_workdir` set (signing on), the candidate is signed as the Pusher will sign
    it and served with --require-signed, so the server verifies before it loads."""
    files = sorted(glob.glob(os.path.join(examples.uri, f"Split-{split}", "*")))
    key = signing.resolve_key(signing_key or None, signing_workdir) if signing_workdir else None
    report = check.run_check(
        os.path.join(model.uri, "Format-Serving"), files, model_name, blessing.uri,
        num_requests=num_requests, max_latency_ms=max_latency_ms, sign_with=key,
    )
    blessing.set_int_custom_property("blessed", 1 if report["passed"] else 0)
    # Marker files as InfraValidator writes them, for tools that look for those.
    open(os.path.join(blessing.uri, "INFRA_BLESSED" if report["passed"] else "INFRA_NOT_BLESSED"), "w").close()
    if report["passed"]:
        logger.info("serving check passed: %s", report)
    else:
        logger.warning("serving check FAILED, the model will not be pushed: %s", "; ".join(report["reasons"]))
