"""Version management: the on-disk model repository a TF Serving server reads (version folders,
models.config with its labels, the canary's rollout file, history.jsonl, signatures, rollback).
TensorFlow-free."""
