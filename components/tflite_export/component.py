"""TFLiteExport: on-device variants of the pushed model (no quantization, dynamic-range,
full-integer), each scored on the window's eval examples beside the SavedModel and
published next to the served version only within an accuracy-drop bound.

A Python-function component after the Pusher: it reads the PushedModel (nothing pushed:
nothing exported), converts the configured TFLite-runnable signature, and records per
variant size and accuracy on its output artifact in ML Metadata, where governance reports
read them. A variant over the bound is recorded and not published; the SavedModel's push is
never affected. The work is in `executor.py`.
"""

from tfx.dsl.component.experimental.annotations import InputArtifact, OutputArtifact, Parameter
from tfx.dsl.component.experimental.decorators import component
from tfx.types.artifact import Artifact
from tfx.types.standard_artifacts import Examples, Model, PushedModel

from components.tflite_export import executor


class TFLiteExports(Artifact):
    """The converted variants, their sizes and accuracies, and what was published."""

    TYPE_NAME = "TFLiteExports"


@component
def TFLiteExport(
    model: InputArtifact[Model],
    examples: InputArtifact[list[Examples]],
    pushed_model: InputArtifact[PushedModel],
    exports: OutputArtifact[TFLiteExports],
    signature: Parameter[str],
    input_key: Parameter[str],
    label_key: Parameter[str],
    raw_input_key: Parameter[str] = "",
    variants: Parameter[str] = "float,dynamic_range,int8",
    max_accuracy_drop: Parameter[float] = 0.02,
    representative_examples: Parameter[int] = 200,
    signing_key: Parameter[str] = "",
    signing_workdir: Parameter[str] = "",
) -> None:
    """Converts, scores and publishes the TFLite variants of the pushed model."""
    executor.run(model, examples, pushed_model, exports, signature, input_key, label_key, raw_input_key, variants,
                 max_accuracy_drop, representative_examples, signing_key, signing_workdir)
