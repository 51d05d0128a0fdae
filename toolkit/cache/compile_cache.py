"""The compile cache around the compiler (:func:`compile_model`): look the bound model up before the passes run,
store the result after.

Entries (toolkit.cache.store): ``compile/<compile key>`` (toolkit.cache.compile_entry), and
``family/<family key>`` → ``{"compile": key}``, the latest compile of a model with the same structure, from
which a value-edited model is patched (toolkit.cache.patch). Hits, misses and patches are logged on logger
``npuscope.cache`` and recorded in the result: ``CompileResult.cache`` (dict: key, status, kernel counts,
log lines) and a ``compile_cache`` entry in ``CompileResult.passes`` (so the compile log shows
"cache: ..." lines).
"""

from __future__ import annotations

import logging
import time

from toolkit.cache import compile_entry, keys, patch
from toolkit.cache.file_digests import FileDigests
from toolkit.cache.settings import Settings, from_config
from toolkit.cache.store import EntryStore, LazyPayload
from toolkit.compiler import pipeline
from toolkit.config.schema import Config
from toolkit.core.records import PassLog

LOG = logging.getLogger("npuscope.cache")


class CompileCache:
    """One compile's use of the cache; ``result`` is set on a hit or a patch (see :func:`begin`)."""

    def __init__(self, settings: Settings, t0: float):
        self.settings, self.t0 = settings, t0
        self.store = EntryStore(settings.root, settings.limit)
        self.key = self.family = ""
        self.manifest: keys.Manifest | None = None
        self.values: dict = {}
        self.status = "miss"
        self.note = ""
        self.result = None
        self.base, self.stale = "", set()

    # ------------------------------------------------------------------ lookup
    def _exact(self, config, model_path: str) -> None:
        got = self.store.get("compile", self.key)
        if got is not None:
            try:
                self.result = compile_entry.from_entry(*got, config, model_path)
                self.status = "hit"
            except (KeyError, TypeError, ValueError) as exc:
                LOG.warning("compile cache entry %s has an unknown layout (%s); recompiling", self.key[:16], exc)

    def _patch(self, work, config, model_path: str) -> None:
        fam = self.store.get("family", self.family)
        base_key = fam[0].get("compile") if fam is not None else None
        base = self.store.get("compile", base_key) if base_key and base_key != self.key else None
        if base is None:
            return
        try:
            done = patch.patch(*base, keys.Manifest.from_dict(base[0]["manifest"]), self.manifest, work, config,
                               model_path)
        except patch.NotPatchable as exc:
            LOG.info("compile cache: not patching %s: %s", base_key[:16], exc)
            return
        self.result, self.values, self.base, self.stale = done.result, done.values, base_key, done.stale_nodes
        self.status, self.note = "patched", f" from {base_key[:16]} ({done.what})"

    # ------------------------------------------------------------------ store
    def _store(self, result) -> None:
        if not self.settings.writes:
            return
        passes = result.passes
        try:
            result.passes = [p for p in passes if p.name != "compile_cache"]
            meta = compile_entry.to_meta(result, self.manifest.to_dict(), self.values)
        finally:
            result.passes = passes
        self.store.put("compile", self.key, meta, LazyPayload(result.model.SerializeToString))
        self.store.put("family", self.family, {"compile": self.key}, evict=True)

    def _attach(self, result, ops_before: int) -> None:
        ms = (time.perf_counter() - self.t0) * 1e3
        line = f"compile entry {self.status}{self.note} (key {self.key[:16]}; {self.settings.root})"
        LOG.info("compile cache (%s): %s", self.settings.mode, line)
        log = [line]
        result.cache = {"key": self.key, "status": self.status, "mode": self.settings.mode,
                        "dir": str(self.settings.root), "model": result.model, "log": log,
                        "base": self.base, "stale_nodes": sorted(self.stale)}
        result.passes.append(PassLog("compile_cache", True, "", ops_before, len(result.model.graph.node),
                                     len(result.plan.kernels), int(self.status != "miss"), ms, log))

    def finish(self, result, ops_before: int) -> None:
        """After a full compile: store ``result`` and record the miss in it."""
        self._store(result)
        self._attach(result, ops_before)


def begin(work, config, disabled, model_path: str, t0: float) -> CompileCache | None:
    """Look up the compile of ``work`` (the bound, name-normalised model, before any pass). Returns None when
    the cache is disabled or the model cannot be keyed; else a CompileCache whose ``result`` is the cached or
    patched CompileResult (already recorded), or None on a miss (call ``finish`` after compiling)."""
    settings = from_config(config)
    if settings.mode == "disable":
        return None
    cc = CompileCache(settings, t0)
    try:
        digests = FileDigests(settings.root, reads=settings.reads, writes=settings.writes)
        cc.key = keys.compile_key(work, config, disabled, file_digest=digests.digest)
    except keys.Uncacheable as exc:
        LOG.info("compile cache: not caching this model: %s", exc)
        return None
    ops_before = len(work.graph.node)
    if settings.reads:
        cc._exact(config, model_path)
    if cc.result is None:  # the manifest (per-node digests) only when the exact entry is not there
        cc.manifest = keys.Manifest.of(work)
        cc.family = cc.manifest.family_key(config, disabled)
        if settings.reads:
            cc._patch(work, config, model_path)
    if cc.result is None:
        cc.values = compile_entry.constant_values(work)
        return cc
    cc.result.compile_ms = (time.perf_counter() - t0) * 1e3
    if cc.status == "patched":
        cc._store(cc.result)
    cc._attach(cc.result, ops_before)
    return cc


def compile_model(model, config: Config | None = None, *, input_shapes=None, model_path: str = "",
                  disabled: tuple[str, ...] = ()):
    """toolkit.compiler.pipeline.compile_model through the compile cache (docs/compile-cache.md): the bound
    model is looked up first; a hit or a patch returns the cached result, a miss compiles and stores it.
    Same arguments, result and errors as the compiler's; ``CompileResult.cache`` records what happened (None
    when the cache is disabled or the model cannot be keyed)."""
    config = config or Config()
    t0 = time.perf_counter()
    bound = pipeline.bind(model, config, input_shapes)
    cached = begin(bound.model, config, disabled, model_path, t0)
    if cached is not None and cached.result is not None:
        # a hit: this bound model compiled before, so its shape-inference check passed then; a patch: it differs
        # from one that did only in Conv values and attributes that keep every shape (toolkit.cache.patch)
        return cached.result
    ops_before = len(bound.model.graph.node)
    result = pipeline.compile_bound(bound, config, model_path=model_path, disabled=disabled, t0=t0)
    if cached is not None:
        cached.finish(result, ops_before)
    return result
