"""Governance: lineage-backed reports for every candidate model, the model registry view, and
the optional human approval before push. Everything is read back from ML Metadata and the
artifacts it points to, never from values the pipeline passed along on the side."""
