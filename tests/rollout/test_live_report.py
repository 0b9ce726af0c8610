"""The governance report's Live section: a version's rollout read back from MLMD and its history."""

import os

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from governance import html, record
from rollout import controller
from serving.repository import versions
from tests.rollout.test_versions import _version


def test_the_live_section_puts_offline_beside_live_and_lists_the_decisions(tmp_path):
    root = str(tmp_path / "serving")
    base = os.path.join(root, "taxi")
    for v in (1, 2):
        _version(base, v)
    versions.start_canary(root, "taxi", 1, 0.1, reason="first")
    versions.start_canary(root, "taxi", 2, 0.1, reason="blessed candidate")
    cfg = metadata_store_pb2.ConnectionConfig()
    cfg.sqlite.filename_uri = str(tmp_path / "m.sqlite")
    store = metadata_store.MetadataStore(cfg)
    live = {"stable": {"version": 1, "labelled": 900, "auc": {"value": 0.91, "low": 0.9, "high": 0.92}},
            "canary": {"version": 2, "labelled": 100, "auc": {"value": 0.62, "low": 0.55, "high": 0.69}}}
    decision = controller.Decision(model="taxi", action="rollback", reason="auc -0.29: the canary is worse",
                                   metric="auc", stable=1, canary=2, live=live,
                                   difference={"estimate": -0.29, "low": -0.4, "high": -0.18}, counts={"labels": 1000},
                                   rejected=[], decided_at="2026-12-02T00:00:00+00:00")
    versions.end_canary(root, "taxi", promote=False, reason=decision.reason, user="controller")
    decision.applied = True
    controller.record(store, str(tmp_path), decision)
    evaluation = {"overall": {"auc": {"candidate": 0.93, "baseline": 0.92}}}
    got = record.live_record(store, os.path.join(base, "2"), evaluation)
    assert got["role"] == "rolled back" and got["compared_with"] == 1
    assert got["offline_vs_live"] == [{"metric": "auc", "offline": 0.93, "live": 0.62, "live_low": 0.55,
                                       "live_high": 0.69, "other_live": 0.91}]
    assert [d["action"] for d in got["decisions"]] == ["rollback"]
    page = "\n".join(html._live(got, {"pushed": True}))
    assert "Live: version 2 is rolled back" in page and "auc -0.29: the canary is worse" in page
    assert record.live_record(store, os.path.join(base, "1"), evaluation)["role"] == "stable"
    assert "no rollout has measured" in "".join(html._live(None, {"pushed": True}))


def test_lineage_readers_pass_over_decisions_which_belong_to_no_pipeline_run(tmp_path):
    from core import metadata_queries

    cfg = metadata_store_pb2.ConnectionConfig()
    cfg.sqlite.filename_uri = str(tmp_path / "m.sqlite")
    store = metadata_store.MetadataStore(cfg)
    store.put_context_type(metadata_store_pb2.ContextType(name="node"))
    store.put_context_type(metadata_store_pb2.ContextType(name="pipeline_run"))
    model_type = store.put_artifact_type(metadata_store_pb2.ArtifactType(name="Model"))
    [model_id] = store.put_artifacts([metadata_store_pb2.Artifact(type_id=model_type, uri="/m")])
    decision = controller.Decision(model="taxi", action="continue", reason="waiting", metric="auc", stable=1,
                                   canary=2, live={}, difference=None, counts={}, rejected=[])
    execution_id = controller.record(store, str(tmp_path), decision)
    event = metadata_store_pb2.Event(artifact_id=model_id, execution_id=execution_id,
                                     type=metadata_store_pb2.Event.INPUT)
    event.path.steps.add().key = "canary"
    store.put_events([event])
    [(execution, node)] = metadata_queries.consumers(store, model_id)
    assert node == "?" and metadata_queries.run_id_of(store, execution) is None
    assert metadata_queries.consumers(store, model_id, key="model") == []
