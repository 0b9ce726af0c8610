"""The governance report of one pipeline run (one candidate model): the run's record
(`governance.record`) as JSON for machines (`report.json`) and HTML for people
(`report.html`, see `html.py`).

Written to `<pipeline_root>/governance/<run id>/` for every run (pushed, not blessed,
stopped by the data gate, failed), and copied to `assets.extra/governance/` of the pushed
SavedModel so it travels with the model.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil

from core import files, layout
from governance.record import RunRecord

SCHEMA_VERSION = 2


def build(record: RunRecord) -> dict:
    """The report of a run: its record, with when it was generated."""
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **record.to_dict(),
    }


def write(record: RunRecord, pipeline_root: str) -> dict:
    """Writes report.json and report.html, copies them beside the pushed SavedModel;
    returns {"json": path, "html": path, "report": dict}."""
    from governance import html

    report = build(record)
    folder = layout.report_dir(pipeline_root, record.run_id)
    paths = {"json": os.path.join(folder, layout.REPORT_JSON), "html": os.path.join(folder, layout.REPORT_HTML)}
    files.write_text(paths["json"], json.dumps(report, indent=2, sort_keys=True, default=str))
    files.write_text(paths["html"], html.render(report))
    push = report["push"]
    if push.get("pushed") and push.get("path") and os.path.isdir(push["path"]):
        # The report travels with the model; written whole, then renamed into place.
        target = os.path.join(push["path"], "assets.extra", layout.REPORT_DIR)
        staging = target + f".tmp-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        for p in paths.values():
            shutil.copy(p, staging)
        paths["with_model"] = files.replace_dir(staging, target)
    return {**paths, "report": report}
