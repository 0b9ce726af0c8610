"""The typed pipeline config: parsed and validated once, from YAML and CLI overrides.

Every runner (the local `retrain run`, Airflow) builds the pipeline from one of these via
`pipelines.factory.create_pipeline(config)`. Errors name the offending key.

    schema.py      PipelineConfig: the top-level keys (type, default, comment) and what
                   derives from them; `config.block(name)` parses a settings block
    blocks.py      the settings class of each block (`trainer:`, `rollout:`, `airflow:` ...)
    validation.py  ranges, every block, rules across keys and against other files
    loading.py     YAML files, `--set` overrides, dicts; `replace` re-validates
"""

from pipelines.config.blocks import BLOCKS
from pipelines.config.loading import CLEAR, from_dict, load, parse_assignments, replace
from pipelines.config.schema import (
    DEFAULT_TRAIN_EPOCHS,
    EXAMPLE_GEN_IDS,
    PROJECT_SETUP_FILE,
    ConfigError,
    PipelineConfig,
)
from pipelines.config.validation import (
    check_hparams,
    hparams_class,
    load_gate_policy,
    schema_features,
    validate,
)

__all__ = [
    "BLOCKS", "CLEAR", "DEFAULT_TRAIN_EPOCHS", "EXAMPLE_GEN_IDS", "PROJECT_SETUP_FILE", "ConfigError",
    "PipelineConfig", "check_hparams", "from_dict", "hparams_class", "load", "load_gate_policy", "parse_assignments",
    "replace", "schema_features", "validate",
]
