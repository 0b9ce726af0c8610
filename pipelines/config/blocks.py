"""The settings blocks of a pipeline config, by key: one settings class each.

Every class derives from `core.settings.Settings`, so one loader refuses unknown keys,
missing ones and wrong types for all of them, naming the key's path
(`rollout.canary_share: ...`); a class's `check()` adds its range rules. The class lives
beside the code that uses the block (the trainer toolkit, the rollout, a component...).
Validation parses each block at load; docs/reference/config.md documents each from its
class. The `beam:` block's class (`BeamSettings`, pipelines/beam.py) is loaded the same way;
it is not listed here because its `nodes:` may only name the pipeline's Beam nodes.
"""

from __future__ import annotations

from components.data_gate.consistency import SpanConsistency
from components.evaluator.fairness import FairnessSettings
from components.evaluator.new_span import NewSpanSettings
from components.evaluator.staleness import StalenessSettings
from components.example_gen.settings import IngestSettings
from components.serving_check.performance import PerformanceSettings
from components.serving_skew.settings import SkewSettings
from components.statistics_gen.settings import StatisticsSettings
from components.tflite_export.settings import TFLiteSettings
from core.airflow_settings import AirflowSettings, AlertSettings
from core.retention import RetentionSettings
from core.settings import Settings
from governance.model_card import ModelCardSettings
from governance.scorecard import ScorecardSettings
from pipelines.analyzer_cache import TransformSettings
from rollout.settings import RolloutSettings
from serving.repository.signing import SigningSettings
from trainer_toolkit.importance import ImportanceSettings
from trainer_toolkit.settings import SimpleBaselineSettings, TrainerSettings
from trainer_toolkit.tuning import TuningSettings

BLOCKS: dict[str, type[Settings]] = {
    "trainer": TrainerSettings,
    "ingestion": IngestSettings,
    "transform": TransformSettings,
    "statistics": StatisticsSettings,
    "span_consistency": SpanConsistency,
    "new_span": NewSpanSettings,
    "simple_baseline": SimpleBaselineSettings,
    "staleness": StalenessSettings,
    "fairness": FairnessSettings,
    "importance": ImportanceSettings,
    "performance": PerformanceSettings,
    "tuning": TuningSettings,
    "rollout": RolloutSettings,
    "serving_skew": SkewSettings,
    "signing": SigningSettings,
    "tflite": TFLiteSettings,
    "model_card": ModelCardSettings,
    "airflow": AirflowSettings,
    "alerts": AlertSettings,
    "retention": RetentionSettings,
    "scorecard": ScorecardSettings,
}
