"""The span ledger on both stores: one claim per span under a race, and what each wait waits for."""

import concurrent.futures
import multiprocessing
import threading
import time

import pytest

from core import metadata
from runner import span_ledger as L


@pytest.fixture(params=["sqlite", "mariadb"])
def where(request, tmp_path):
    if request.param == "sqlite":
        return metadata.parse("sqlite", str(tmp_path / "m.sqlite"))
    env = request.getfixturevalue("mariadb")(f"ledger_{request.node.name.split('[')[0][-40:]}")
    return metadata.resolve(None, "", env)


def _take(args):
    url, password, owner = args
    store = metadata.open_store(metadata.parse(url, "", password))
    return owner if L.take(store, "taxi", 201612, owner, L.RUN) is not None else None


def test_one_claim_wins_a_race_of_processes(where):
    metadata.open_store(where)  # the schema exists before parallel writers start
    url = where.url if not where.is_sqlite else f"sqlite:///{where.path.lstrip('/')}"
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(6, mp_context=ctx) as pool:
        winners = [w for w in pool.map(_take, [(url, where.password, f"run-{i}") for i in range(6)]) if w]
    assert len(winners) == 1
    [claim] = L.claims(metadata.open_store(where), "taxi").values()
    assert (claim.owner, claim.attempt, claim.active) == (winners[0], 1, True)


def test_owner_continues_its_claim_and_the_next_run_takes_the_next_attempt(where):
    store = metadata.open_store(where)
    first = L.take(store, "taxi", 201611, "a", L.BACKFILL)
    assert L.take(store, "taxi", 201611, "a", L.BACKFILL) == first  # a retried task
    assert L.take(store, "taxi", 201611, "b", L.RUN) is None  # held
    L.update(store, first, L.FINISHED, L.PASSED)
    second = L.take(store, "taxi", 201611, "b", L.RUN)
    assert (second.attempt, second.kind, second.owner) == (2, L.RUN, "b")
    assert L.claims(store, "digits") == {}


def _claim(store, span, owner, kind=L.RUN, phase=None, gate=None):
    c = L.take(store, "taxi", span, owner, kind)
    if phase:
        c = L.update(store, c, phase, gate)
    return c


def test_what_each_wait_waits_for(where):
    store = metadata.open_store(where)
    _claim(store, 201606, "r06", L.BACKFILL, L.FINISHED, L.PASSED)
    _claim(store, 201607, "r07", L.RUN, L.GATED, L.PASSED)  # gated, model phase still open
    _claim(store, 201608, "r08", L.RUN, L.GATED, L.STOPPED)
    pending = _claim(store, 201609, "r09")  # still ingesting
    _claim(store, 201610, "r10")  # the run asking
    spans = lambda what, span=201610, window=3: [c.span for c in L.blockers(store, "taxi", span, window, what, f"r{span % 100}")]  # noqa: E731
    assert spans(L.BASELINE) == [201609]
    assert spans(L.WINDOW) == [201609]
    assert spans(L.MODELS) == [201609, 201608, 201607]  # earlier months' runs not finished
    L.update(store, pending, L.GATED, L.STOPPED)
    # 201609 and 201608 stopped: the baseline is 201607, decided; the window has nothing open.
    assert spans(L.BASELINE) == [] and spans(L.WINDOW) == []
    assert spans(L.WINDOW, span=201607, window=1) == []  # outside the window: not waited for
    assert spans(L.MODELS, span=201607) == []  # 201606 was only a backfill


def test_wait_returns_when_the_gate_decides_and_times_out_naming_the_claim(where):
    store = metadata.open_store(where)
    pending = _claim(store, 201609, "r09")
    _claim(store, 201610, "r10")
    with pytest.raises(L.WaitTimeout) as e:
        L.wait(lambda: metadata.open_store(where), "taxi", 201610, 3, L.WINDOW, "r10", lambda m: None, 0.3, 0.1)
    assert "span 201609" in str(e.value) and "r09" in str(e.value)
    threading.Timer(0.5, lambda: L.update(metadata.open_store(where), pending, L.GATED, L.PASSED)).start()
    said = []
    start = time.monotonic()
    L.wait(lambda: metadata.open_store(where), "taxi", 201610, 3, L.WINDOW, "r10", said.append, 30, 0.1)
    assert 0.4 < time.monotonic() - start < 10 and "waits for span 201609" in said[0]


def test_take_waiting_gets_the_claim_once_the_holder_closes_it(where):
    store = metadata.open_store(where)
    held = L.take(store, "taxi", 201612, "backfiller", L.BACKFILL)
    with pytest.raises(L.WaitTimeout, match="backfiller"):
        L.take_waiting(store, "taxi", 201612, "run", L.RUN, lambda m: None, 0.2, 0.05)
    threading.Timer(0.3, lambda: L.update(metadata.open_store(where), held, L.FINISHED, L.PASSED)).start()
    claim = L.take_waiting(store, "taxi", 201612, "run", L.RUN, lambda m: None, 30, 0.05)
    assert (claim.owner, claim.attempt) == ("run", 2)
