"""Resolver strategy: the newest artifact of each span inside a span range, newest spans first.

TFX's SpanRangeStrategy keeps every artifact of a span, so a span ingested twice (its
data folder changed) would be trained on twice. This one keeps only the latest artifact
per span and can cap how many spans it returns, which also makes it the "previous span"
picker for drift baselines (a range ending before the current span, `max_spans=1`).

Span of an artifact: CsvExampleGen stamps a `span` custom property on Examples.
StatisticsGen 1.16 copies `examples.span`, a *property* CsvExampleGen leaves unset, so
every ExampleStatistics says span 0; for those the span is read through MLMD lineage
(the Examples its producing execution consumed) and stamped on as a custom property,
which the consuming execution then records.
"""

from typing import Any, Optional

from ml_metadata.proto import metadata_store_pb2
from tfx import types
from tfx import v1 as tfx

SPAN = "span"
_EVENT = metadata_store_pb2.Event


def _own_span(artifact: types.Artifact) -> Optional[int]:
    if artifact.has_custom_property(SPAN):
        return artifact.get_int_custom_property(SPAN)
    return None


def span_from_lineage(store: Any, artifact: types.Artifact) -> Optional[int]:
    """Span of the input artifacts of the execution that produced `artifact`, if unique."""
    producers = [
        e.execution_id
        for e in store.get_events_by_artifact_ids([artifact.id])
        if e.type == _EVENT.OUTPUT
    ]
    if not producers:
        return None
    input_ids = [
        e.artifact_id
        for e in store.get_events_by_execution_ids(producers)
        if e.type == _EVENT.INPUT
    ]
    found = set()
    for a in store.get_artifacts_by_id(input_ids):
        if SPAN in a.custom_properties:
            found.add(a.custom_properties[SPAN].int_value)
    return found.pop() if len(found) == 1 else None


class SpanWindowStrategy(tfx.dsl.experimental.ResolverStrategy):
    """Resolves each input to the newest artifact per span within [start_span, end_span]."""

    def __init__(self, start_span: int, end_span: int, max_spans: int = 0):
        if start_span > end_span:
            raise ValueError(f"start_span {start_span} is after end_span {end_span}")
        self._start = start_span
        self._end = end_span
        self._max_spans = max_spans

    def select(self, spans_and_artifacts: list[tuple[int, types.Artifact]]) -> list[types.Artifact]:
        """The pure selection rule over (span, artifact) pairs, newest span first."""
        newest: dict[int, types.Artifact] = {}
        for span, artifact in spans_and_artifacts:
            if not self._start <= span <= self._end:
                continue
            if span not in newest or artifact.id > newest[span].id:
                newest[span] = artifact
        chosen = [newest[s] for s in sorted(newest, reverse=True)]
        return chosen[: self._max_spans] if self._max_spans else chosen

    def resolve_artifacts(
        self, store: Any, input_dict: dict[str, list[types.Artifact]]
    ) -> Optional[dict[str, list[types.Artifact]]]:
        result = {}
        for key, artifacts in input_dict.items():
            pairs = []
            for artifact in artifacts:
                span = _own_span(artifact)
                if span is None:
                    span = span_from_lineage(store, artifact)
                    if span is None:
                        continue
                    artifact.set_int_custom_property(SPAN, span)
                pairs.append((span, artifact))
            result[key] = self.select(pairs)
        return result
