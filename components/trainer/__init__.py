"""The trainer toolkit every pipeline's `run_fn` uses: strategy, precision, input, fit, export.

`hardware` says what the process runs on; `strategy` and `precision` choose settings from
it (pure functions, overridable in config); `dataset` builds the input pipeline; `training`
runs `Model.fit` with fault tolerance and records the provenance that `executor` copies
onto the Model artifact in MLMD.
"""
