"""Evaluator: TFX's Evaluator whose blessing weighs a drop vs the baseline by its significance."""

from __future__ import annotations

import json

from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from components.evaluator import executor
from components.tfx_v1 import tfx


class EvaluatorSpec(standard_component_specs.EvaluatorSpec):
    """TFX's EvaluatorSpec plus the significance settings (JSON: level, min_examples)."""

    PARAMETERS = {**standard_component_specs.EvaluatorSpec.PARAMETERS, "significance": ExecutionParameter(type=str)}


class Evaluator(tfx.components.Evaluator):
    """`tfx.components.Evaluator` with `components.evaluator.executor.Executor`.

    Same inputs and outputs; the node id stays `Evaluator`. `significance_level` and
    `min_eval_examples` become the `significance` execution property (so changing them
    re-runs the evaluation rather than reusing a cached verdict), with `max_eval_examples`
    (above it, a seeded sample of the eval split is evaluated: executor.py), and the
    new-span check's settings with the task's key metric (new_span.py), and those of the
    simple baseline, staleness and fairness checks (with the task); `fairness_groups`: the
    fairness features sliced for the groups only (not also in slice_features), whose groups
    too small to judge are counted by the executor and left out of TFMA's slicing.
    """

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, *, significance_level: float, min_eval_examples: int, max_eval_examples: int = 0,
                 key_metric: str | None = None, new_span: dict | None = None, simple_baseline: dict | None = None,
                 staleness: dict | None = None, fairness: dict | None = None, task: str | None = None,
                 fairness_groups: list[str] | None = None, **kwargs):
        super().__init__(**kwargs)
        # TFX's __init__ builds (and validates) its own spec; extend it with the parameter.
        old = self.spec
        self.spec = EvaluatorSpec(
            **old.inputs,
            **old.outputs,
            **old.exec_properties,
            significance=json.dumps({"level": significance_level, "min_examples": min_eval_examples,
                                     "max_examples": max_eval_examples, "key_metric": key_metric,
                                     "new_span": new_span or {}, "simple_baseline": simple_baseline or {},
                                     "staleness": staleness or {}, "fairness": fairness or {}, "task": task,
                                     "fairness_groups": list(fairness_groups or [])},
                                    sort_keys=True),
        )
