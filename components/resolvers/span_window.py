"""Resolver strategy: the newest artifact of each span inside a span range, newest spans first.

TFX's SpanRangeStrategy keeps every artifact of a span, so a span ingested twice (its
data folder changed) would be trained on twice. This one keeps only the latest artifact
per span, can cap how many spans it returns (the "previous span" for drift baselines is
a range ending before the current span with `max_spans=1`), and can keep only spans that
another input vouches for: with `require_key="reports"`, only spans whose DataGate
report exists (a report is published only when the gate passed), so a span the gate
stopped never reaches training or the drift baseline. With `pipeline_name`, spans whose
latest quarantine decision in MLMD is "quarantine" (`retrain quarantine`) are skipped too.
"""

from typing import Any

from tfx import types
from tfx.dsl.components.common.resolver import ResolverStrategy  # = tfx.v1.dsl.experimental's

from governance import quarantine

SPAN = "span"


def span_of(artifact: types.Artifact) -> int | None:
    """The `span` custom property CsvExampleGen (and DataGate) stamp on their outputs."""
    if artifact.has_custom_property(SPAN):
        return artifact.get_int_custom_property(SPAN)
    return None


class SpanWindowStrategy(ResolverStrategy):
    """Resolves each input to the newest artifact per span within [start_span, end_span]."""

    def __init__(
        self, start_span: int, end_span: int, max_spans: int = 0, require_key: str = "", pipeline_name: str = ""
    ):
        if start_span > end_span:
            raise ValueError(f"start_span {start_span} is after end_span {end_span}")
        self._start = start_span
        self._end = end_span
        self._max_spans = max_spans
        self._require_key = require_key
        self._pipeline_name = pipeline_name

    def select(
        self,
        artifacts: list[types.Artifact],
        allowed_spans: set[int] | None = None,
        excluded_spans: frozenset[int] = frozenset(),
    ) -> list[types.Artifact]:
        """The pure selection rule, newest span first."""
        newest: dict[int, types.Artifact] = {}
        for artifact in artifacts:
            span = span_of(artifact)
            if span is None or not self._start <= span <= self._end or span in excluded_spans:
                continue
            if allowed_spans is not None and span not in allowed_spans:
                continue
            if span not in newest or artifact.id > newest[span].id:
                newest[span] = artifact
        chosen = [newest[s] for s in sorted(newest, reverse=True)]
        return chosen[: self._max_spans] if self._max_spans else chosen

    def resolve_artifacts(
        self, store: Any, input_dict: dict[str, list[types.Artifact]]
    ) -> dict[str, list[types.Artifact]] | None:
        excluded = frozenset(quarantine.current(store, self._pipeline_name)) if self._pipeline_name else frozenset()
        allowed = None
        if self._require_key:
            allowed = {span_of(a) for a in input_dict.get(self._require_key, [])}
        return {
            key: self.select(artifacts, None if key == self._require_key else allowed, excluded)
            for key, artifacts in input_dict.items()
        }
