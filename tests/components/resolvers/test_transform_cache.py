"""EarlierSpanCacheStrategy: the analyzer cache of the window that ends latest before the span."""

from tfx.types import standard_artifacts

from components.resolvers.transform_cache import select


def _cache(id_: int):
    a = standard_artifacts.TransformCache()
    a.id = id_
    return a


def test_newest_cache_of_a_window_before_the_span():
    caches = [(_cache(3), [201609, 201610]), (_cache(7), [201610, 201611]), (_cache(5), [201608, 201609])]
    assert [a.id for a in select(caches, 201612)] == [7]


def test_a_cache_written_by_this_span_is_not_fed_back():
    # The first run of 201612 read cache 7 and wrote 9; a run of 201612 again must read 7,
    # or Transform's inputs change and TFX's execution cache misses (Transform, Trainer rerun).
    caches = [(_cache(7), [201610, 201611]), (_cache(9), [201611, 201612])]
    assert [a.id for a in select(caches, 201612)] == [7]
    # A later span's run (a backfill of an older month) is not an earlier run either.
    assert [a.id for a in select([(_cache(9), [201611, 201612])], 201611)] == []


def test_a_backfilled_older_month_does_not_change_a_reruns_cache():
    # 201612 ran with cache 7 (from the 201611 run); then 201610 was backfilled, writing 11.
    # A rerun of 201612 still reads 7, the window closest before it, whatever ran since.
    caches = [(_cache(7), [201610, 201611]), (_cache(9), [201611, 201612]), (_cache(11), [201609, 201610])]
    assert [a.id for a in select(caches, 201612)] == [7]
    # Two runs of the same month (its data changed): the newer one's cache.
    assert [a.id for a in select([(_cache(7), [201611]), (_cache(8), [201611])], 201612)] == [8]


def test_nothing_on_the_first_run_or_without_spans():
    assert select([], 201612) == []
    assert select([(_cache(2), [])], 201612) == []
