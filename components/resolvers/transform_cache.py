"""Resolver strategy: tf.Transform's analyzer cache from the newest run of an earlier span.

Transform writes `updated_analyzer_cache` (a TransformCache: one folder per analyzed
dataset, holding that dataset's analyzer accumulators, keyed by the analyzers' graph);
fed back as `analyzer_cache`, a span of the window that an earlier run analyzed is read
from the cache instead of from its examples, so a new month analyzes only itself.

Which cache: the one whose Transform's window ends latest before this run's span (the run
of the month before, in steady state; the newest of those if there are several). Not
simply the newest cache: a run of the same span again would then get the cache its first
run wrote, a new input, and TFX would run Transform and the Trainer again instead of
reusing them (execution cache). Nor the newest before the span: a backfilled older month
run in between would change a rerun's input the same way. On the first run there is none,
and Transform analyzes everything.

The cache does not change the transform graph: with a cache output, TFX analyzes each
dataset on its own and merges the accumulators, so a span's entry is the same whether it
was computed now or read from an earlier run; a changed preprocessing_fn has other cache
keys and is analyzed afresh.
"""

from typing import Any

from tfx import types
from tfx.dsl.components.common.resolver import ResolverStrategy  # = tfx.v1.dsl.experimental's

from core import metadata_queries

CACHE = "cache"


def select(candidates: list[tuple[types.Artifact, list[int]]], span: int) -> list[types.Artifact]:
    """The cache whose producer's input spans end latest before `span` (newest id on a tie).

    Args:
      candidates: (cache artifact, the spans its Transform read).
      span: this run's span.
    """
    earlier = [(max(spans), cache.id, cache) for cache, spans in candidates if spans and max(spans) < span]
    return [max(earlier, key=lambda c: c[:2])[2]] if earlier else []


class EarlierSpanCacheStrategy(ResolverStrategy):
    """Resolves `cache` to the analyzer cache of the Transform whose window ends latest
    before this run's span, or to nothing."""

    def __init__(self, span: int):
        self._span = span

    def resolve_artifacts(self, store: Any, input_dict: dict[str, list[types.Artifact]]):
        candidates = []
        for cache in input_dict.get(CACHE, []):
            execution, _ = metadata_queries.producer(store, cache.id)
            if execution is None:
                continue
            examples = metadata_queries.inputs_of(store, execution.id).get("examples", [])
            spans = [s for s in (metadata_queries.props(a).get("span") for a in examples) if s is not None]
            candidates.append((cache, spans))
        return {CACHE: select(candidates, self._span)}
