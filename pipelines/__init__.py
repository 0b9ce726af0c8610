"""Pipeline definitions: the typed config, the one factory, and reference pipelines."""
