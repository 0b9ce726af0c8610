"""Measured workarounds for Apache Beam 2.78 in this runtime, applied where nodes run.

1. Beam's state cache (side inputs of the in-memory DirectRunner: TFT's analyzer results,
TFDV's and TFMA's) weighs every value it caches with objsize, and objsize 0.7 builds its
set of objects to leave out, every loaded module's globals, anew on every call: with
TensorFlow's ~5,000 modules loaded that was 14 of the ~95 s of a steady taxi run (py-spy:
`statecache.get_deep_size` -> `TraversalContext._update_exclude_set`). `apply()` gives
Beam's `get_deep_size` the same set, built once per set of loaded modules. Beam's own
functions decide the sizes and what is measured, as before.

2. Beam (de)serializes every DoFn of every stage with dill 0.3.1, whose `_trace(False)`
sets its logger's level on every call; `Logger.setLevel` clears the level cache of every
logger in the process. In a steady taxi run that was ~10 s of Transform's and the
Evaluator's stage set-up (py-spy: `dill_pickler.loads` -> `_trace` -> `setLevel` ->
`Manager._clear_cache`). The level is now set only when it changes.

3. From Beam 2.68 the DirectRunner first tries the Prism runner, a Go binary that Beam
downloads from GitHub on first use, and falls back to its Python runner when that fails.
This runtime never downloads code at run time (and these machines cannot: each Beam node
spent ~4 s on the failed download before falling back). The Prism attempt now fails at
once, with the reason, so every Beam node runs on the Python DirectRunner it ran on with
Beam 2.59; a profile that names a runner (portable, Flink, Spark, Dataflow) is unchanged.
"""

from __future__ import annotations

import logging
import sys

_APPLIED = {"done": False}
# Why the DirectRunner's Prism attempt fails here (Beam logs it, then falls back).
PRISM_REFUSED = ("Prism is not used in this runtime: it would download its binary at run time "
                 "(runner/beam_fixes.py); the DirectRunner falls back to its Python runner")
_MODULE_GLOBALS: dict = {"count": -1, "ids": set()}


def _module_globals_ids() -> set[int]:
    """ids of every loaded module's globals (and None), rebuilt when modules are added."""
    if _MODULE_GLOBALS["count"] != len(sys.modules):
        ids = {id(None)}
        for module in list(sys.modules.values()):
            try:
                ids.add(id(vars(module)))
            except TypeError:
                pass
        _MODULE_GLOBALS.update(count=len(sys.modules), ids=ids)
    return _MODULE_GLOBALS["ids"]


def apply() -> None:
    """Patches Beam's state-cache sizing in this process (idempotent)."""
    if _APPLIED["done"]:
        return
    from apache_beam.runners.worker import statecache
    from objsize import traverse

    settings = traverse.ObjSizeSettings(get_size_func=statecache._size_func,
                                        get_referents_func=statecache._get_referents_func,
                                        filter_func=statecache._filter_func, exclude_modules_globals=False)

    def get_deep_size(*objs) -> int:
        context = traverse.TraversalContext(settings)
        context.exclude_set = _module_globals_ids()  # only read while measuring
        return context.get_deep_size(*objs)

    statecache.get_deep_size = get_deep_size

    from dill import _dill as dill_module  # what Beam's dill_pickler calls as dill.dill

    original_trace = dill_module._trace

    def _trace(boolean: bool) -> None:
        if dill_module.log.level != (logging.INFO if boolean else logging.WARN):
            original_trace(boolean)

    dill_module._trace = _trace
    no_prism()
    _APPLIED["done"] = True


def no_prism() -> None:
    """Fix 3 alone: the DirectRunner's Prism attempt fails at once (idempotent). Also what
    the stock-TFX benchmark applies, so both sides run without a download attempt."""
    from apache_beam.runners.portability import prism_runner

    def run_pipeline(self, pipeline, options):
        raise RuntimeError(PRISM_REFUSED)

    prism_runner.PrismRunner.run_pipeline = run_pipeline
