"""LastBlessedModelStrategy: the Evaluator's baseline is the newest blessing, not the newest
model, and a rolled-back canary is passed over."""

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx.types import standard_artifacts

from components.resolvers.baseline_model import BLESSING, MODEL, LastBlessedModelStrategy, select
from core import metadata_queries
from rollout import controller, sequential


def _model(id_: int):
    a = standard_artifacts.Model()
    a.id = id_
    return a


def _blessing(id_: int, model_id: int, blessed: bool = True):
    a = standard_artifacts.ModelBlessing()
    a.id = id_
    a.set_int_custom_property("blessed", int(blessed))
    a.set_int_custom_property("current_model_id", model_id)
    return a


def _ids(resolved):
    return [a.id for a in resolved[MODEL]], [a.id for a in resolved[BLESSING]]


def test_parallel_runs_trained_out_of_order_take_the_model_blessed_last():
    # May's model (id 4) was trained before March's (id 6): parallel runs train in any order.
    # Their Evaluators bless in month order: March (blessing 8), then May (blessing 11).
    # TFX's strategy would take model 6 (highest model id); June must be judged against May.
    models = [_model(4), _model(6), _model(9)]
    blessings = [_blessing(8, 6), _blessing(11, 4), _blessing(12, 9, blessed=False)]
    assert _ids(select(models, blessings)) == ([4], [11])


def test_a_rolled_back_canary_is_passed_over_and_nothing_blessed_gives_no_baseline():
    models = [_model(4), _model(6)]
    blessings = [_blessing(8, 4), _blessing(11, 6)]
    assert _ids(select(models, blessings, rolled_back={6})) == ([4], [8])
    assert _ids(select(models, blessings, rolled_back={4, 6})) == ([], [])
    assert _ids(select(models, [_blessing(8, 4, blessed=False)])) == ([], [])
    assert _ids(select([], [])) == ([], [])


def _store(tmp_path):
    cfg = metadata_store_pb2.ConnectionConfig()
    cfg.sqlite.filename_uri = str(tmp_path / "m.sqlite")
    return metadata_store.MetadataStore(cfg)


def _decide(store, tmp_path, action: str, applied: bool, canary_model: int, stable_model: int) -> None:
    decision = controller.Decision(model="taxi", action=action, reason="test", metric="auc", stable=1, canary=2,
                                   live={}, difference=None, counts={}, rejected=[], applied=applied)
    execution_id = controller.record(store, str(tmp_path), decision)
    events = []
    for key, artifact_id in (("canary", canary_model), ("stable", stable_model)):
        event = metadata_store_pb2.Event(artifact_id=artifact_id, execution_id=execution_id,
                                         type=metadata_store_pb2.Event.INPUT)
        event.path.steps.add().key = key
        events.append(event)
    store.put_events(events)


def test_the_rollback_is_read_from_the_recorded_decisions(tmp_path):
    assert metadata_queries.ROLLBACK_ACTION == sequential.ROLLBACK
    store = _store(tmp_path)
    assert metadata_queries.rolled_back_model_ids(store) == set()
    model_type = store.put_artifact_type(metadata_store_pb2.ArtifactType(name="Model"))
    m1, m2, m3 = store.put_artifacts([metadata_store_pb2.Artifact(type_id=model_type, uri=f"/m{i}") for i in (1, 2, 3)])
    # A decision that was only proposed (not applied) and a promotion roll nothing back.
    _decide(store, tmp_path, sequential.ROLLBACK, applied=False, canary_model=m2, stable_model=m1)
    _decide(store, tmp_path, sequential.PROMOTE, applied=True, canary_model=m2, stable_model=m1)
    assert metadata_queries.rolled_back_model_ids(store) == set()
    # A rollback names its canary, never the stable model it kept.
    _decide(store, tmp_path, sequential.ROLLBACK, applied=True, canary_model=m3, stable_model=m2)
    assert metadata_queries.rolled_back_model_ids(store) == {m3}
    models = [_model(m1), _model(m2), _model(m3)]
    blessings = [_blessing(20, m1), _blessing(21, m2), _blessing(22, m3)]
    resolved = LastBlessedModelStrategy().resolve_artifacts(store, {MODEL: models, BLESSING: blessings})
    assert _ids(resolved) == ([m2], [21])
