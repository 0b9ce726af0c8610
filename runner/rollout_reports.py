"""After a rollout decision: the governance reports of both versions' runs are written again,
so their Live section shows the decision (the report reads it from MLMD and the history)."""

from __future__ import annotations

import os

from core import layout, metadata


def refresh(config, versions: tuple[int, ...], log=lambda message: None) -> list[str]:
    """Rewrites the report of each version's run that has a run folder; returns their paths."""
    from governance import registry
    from runner import runs

    where = config.metadata_store
    if not where.exists():
        return []
    store = metadata.open_store(where, readonly=True)
    written = []
    for version in dict.fromkeys(versions):
        run_id = registry.run_of_version(store, int(version))
        folder = layout.run_dir(config.workdir, config.pipeline_name, run_id) if run_id else None
        if folder is None or not os.path.exists(os.path.join(folder, layout.RUN_INFO)):
            continue
        written.append(runs.write_report(folder, config)["html"])
        log(f"report of version {version} (run {run_id}) updated: {written[-1]}")
    return written
