"""ServingCheck: the candidate must serve, correctly and fast enough, before it is pushed.

A Python-function component producing TFX's standard `InfraBlessing` (custom property
`blessed`, as InfraValidator sets it), which the Pusher checks; the report
(`serving_check.json`) and the warm-up requests the Pusher ships live in the blessing's
folder. The work is in `executor.py`.
"""

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types.standard_artifacts import Examples, InfraBlessing, Model

from components.serving_check import executor


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
    baseline: InputArtifact[Model] = None,  # optional: TFX's spelling of an optional input
    performance: Parameter[str] = "{}",
) -> None:
    """Serves the candidate in a separate `retrain serve` process and checks its answers.
    With `signing_workdir` set (signing on), the candidate is signed as the Pusher will sign
    it and served with --require-signed, so the server verifies before it loads. With a
    `baseline` (the last blessed model), it is served beside the candidate and their
    computing figures are compared under the `performance` settings (JSON)."""
    executor.run(model, examples, blessing, model_name, num_requests, max_latency_ms, split, signing_key,
                 signing_workdir, baseline, performance)
