"""The governance report of one pipeline run (one candidate model): the run's record
(`governance.record`) as JSON for machines (`report.json`) and HTML for people
(`report.html`, see `html.py`).

Written to `<pipeline_root>/governance/<run id>/` for every run (pushed, not blessed,
stopped by the data gate, failed), and copied to `assets.extra/governance/` of the pushed
SavedModel so it travels with the model. A signed version gets its report signed with the
same key (serving/repository/signing.py) before the folder is renamed into place; without the key the
copy is left out rather than make the version fail verification.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil

from core import files, layout
from governance import model_card, scorecard
from governance.record import RunRecord
from serving.repository import signing

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 2


def build(record: RunRecord) -> dict:
    """The report of a run: its record, with when it was generated."""
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        **record.to_dict(),
    }


def write(record: RunRecord, pipeline_root: str, sign_with: signing.SigningKey | None = None,
          model_card_settings: dict | None = None, scorecard_context: dict | None = None) -> dict:
    """Writes report.json and report.html (and, for a pushed model with `model_card_settings`,
    model_card.json), copies them beside the pushed SavedModel (signed with `sign_with`
    where the version is signed); returns {"json": path, "html": path, "report": dict, ...}."""
    from governance import html

    report = build(record)
    if scorecard_context is not None:
        # The ML Test Score from this run's record and the pipeline's earlier ones.
        earlier = [r for r in scorecard.read_reports(pipeline_root) if r.get("run_id") != record.run_id]
        report["scorecard"] = scorecard.compute([report, *earlier], scorecard_context)
    folder = layout.report_dir(pipeline_root, record.run_id)
    paths = {"json": os.path.join(folder, layout.REPORT_JSON), "html": os.path.join(folder, layout.REPORT_HTML)}
    if model_card_settings is not None and report["push"].get("pushed"):
        report["model_card"] = model_card.build(report, model_card_settings)
        paths["model_card"] = os.path.join(folder, model_card.FILENAME)
        files.write_text(paths["model_card"], json.dumps(report["model_card"], indent=2, sort_keys=True))
    files.write_text(paths["json"], json.dumps(report, indent=2, sort_keys=True, default=str))
    files.write_text(paths["html"], html.render(report))
    push = report["push"]
    signed = bool(push.get("signature"))
    if signed and sign_with is None and push.get("pushed"):
        logger.warning("version %s is signed and no signing key was given: its report stays in %s only",
                       push.get("version"), folder)
    elif push.get("pushed") and push.get("path") and os.path.isdir(push["path"]):
        # The report travels with the model; written (and signed) whole beside the version
        # folder, not in it (a verifying server would see a stray file), then renamed in.
        target = os.path.join(push["path"], signing.REPORT_FOLDER)
        staging = os.path.join(os.path.dirname(os.path.abspath(push["path"])),
                               f".report-{os.path.basename(push['path'])}-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        for p in paths.values():
            shutil.copy(p, staging)
        if signed:
            signing.sign_report_folder(staging, sign_with)
        paths["with_model"] = files.replace_dir(staging, target, aside=staging + ".old")
    return {**paths, "report": report}
