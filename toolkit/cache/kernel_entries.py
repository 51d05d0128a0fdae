"""Kernel entries: onnxruntime's optimised model of one kernel, so that a later build loads it with graph
optimisation off instead of optimising again (measured on PP-OCRv4 det: 87 kernel sessions in ~33 ms from
the kernel models, ~14 ms from the stored optimised models).

- ``kernel/<key>`` (key: toolkit.cache.keys.kernel_key — the kernel model's sha256, the optimisation level,
  versions, machine): meta ``{"level": level it was optimised at, "optimized": true}``, payload: the model
  onnxruntime wrote through ``SessionOptions.optimized_model_filepath``. Only for levels outside
  :data:`STORED_AS_IS`: a kernel of those levels is made from its own model either way, so an entry of its own
  would save nothing and cost a file; its model is kept for the bundle only. (Entries with ``"optimized":
  false`` written by earlier versions still load.)
- ``bundle/<compile key>``: every session kernel of one compile in one file (one read instead of one per
  kernel): meta ``{"kernels": [recipe or null], "blobs": {kernel model sha256: [offset, length,
  optimised]}}``, payload: the kernel entries' bytes concatenated. A recipe is what build_kernels needs to
  make the kernel without building its ONNX model: ``{"spec": spec digest, "digest": kernel model sha256,
  "level", "feeds", "fetches", "native"}`` (``null`` for numpy/copy kernels, which are cheap to rebuild).

A :class:`Build` (made by :func:`session_source`) is the session source of one toolkit.runtime.kernels.build_kernels call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile

import onnxruntime as ort

from toolkit.cache import keys
from toolkit.cache.settings import from_config
from toolkit.cache.store import EntryStore
from toolkit.ort.ort_env import DISABLED_OPTIMIZERS, make_session, session_options

LOG = logging.getLogger("npuscope.cache")


def spec_digest(spec, plan, overflow_mode: str, memo: dict | None = None) -> str:
    """sha256 over a KernelSpec and the dtype/shape/storage of the tensors it reads and writes (not their
    offsets: a plan whose offsets were edited still uses the same kernels)."""
    if memo is not None and id(spec) in memo:
        return memo[id(spec)]
    tensors = [[t, *(lambda x: [x.dtype, x.shape, x.storage])(plan.tensors[t])] if t in plan.tensors else [t]
               for t in spec.inputs + spec.outputs]
    digest = hashlib.sha256(json.dumps([spec.__dict__, tensors, overflow_mode], sort_keys=True,
                                       default=str).encode()).hexdigest()
    if memo is not None:
        memo[id(spec)] = digest
    return digest


def _scratch_dir(store: EntryStore) -> str:
    """Where onnxruntime writes an optimised kernel model before it is read back into an entry: /dev/shm when
    writable (measured on ext4: writing then deleting 87 such files took ~170 ms, on tmpfs ~5 ms), else the
    store's own folder."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    folder = store.base / "kernel"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


#: optimisation levels whose kernels are kept as their own model (in bundles only, optimised again when they are
#: loaded): no optimisation at all, and ORT_ENABLE_BASIC, whose rewrites are cheap while writing onnxruntime's
#: optimised model out and reading it back is not (PP-OCRv4 rec, 89 FP32 kernels: 17 ms to build plainly, 32 ms
#: with the optimised model written out, 13 ms to load those). ORT_ENABLE_ALL kernels (NCHWc layouts) store the
#: optimised model (det, 86 FP16 kernels: 33 ms from the kernel models, 14 ms from the optimised ones).
STORED_AS_IS = (False, "basic")


def _session_from_bytes(data: bytes, level) -> ort.InferenceSession:
    return ort.InferenceSession(data, session_options(level), providers=["CPUExecutionProvider"],
                                disabled_optimizers=DISABLED_OPTIMIZERS)


class KernelCache:
    """Kernel entries of one store for one build; counts ``hits`` and ``misses``."""

    def __init__(self, store: EntryStore, reads: bool, writes: bool):
        self.store, self.reads, self.writes = store, reads, writes
        self.hits = self.misses = self.in_memory = 0
        self._scratch: str | None = None  # one file onnxruntime writes every optimised kernel model of this build to
        self._fresh: bool | None = None  # see _fresh_store
        self.made: dict[int, tuple[str, object]] = {}  # id(session) -> (kernel model sha256, level)
        self.payloads: dict[str, tuple[bool, bytes]] = {}  # kernel model sha256 -> (optimised?, entry payload)

    # ------------------------------------------------------------------ sessions
    def note(self, sess, digest: str, level) -> None:
        """Remember which kernel model and level ``sess`` was made from (for the recipes)."""
        self.made[id(sess)] = (digest, level)

    def load(self, digest: str, level):
        """The session of a stored kernel entry, or None (absent, corrupted or refused by onnxruntime)."""
        if not self.reads:
            return None
        key = keys.kernel_key(digest, level)
        if self._fresh_store() and not self.store.queued("kernel", key):
            return None
        got = self.store.get("kernel", key)
        if got is None:
            return None
        meta, payload = got
        try:
            sess = _session_from_bytes(payload, False if meta.get("optimized") else meta.get("level", level))
            self.payloads[digest] = (bool(meta.get("optimized")), payload)
            return sess
        except Exception as exc:  # noqa: BLE001 - an entry onnxruntime refuses is rebuilt
            LOG.warning("compile cache kernel entry %s not loadable by onnxruntime (%s); rebuilding it",
                        key[:16], str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            return None

    def session(self, data: bytes, digest: str, level):
        """A session for kernel model ``data`` (sha256 ``digest``): from its entry on a hit, else built (and
        its optimised model stored). Raises what onnxruntime raises for a model it cannot build."""
        sess = self.load(digest, level)
        if sess is not None:
            self.hits += 1
            LOG.debug("kernel entry hit %s", digest[:16])
            return sess
        self.misses += 1
        LOG.debug("kernel entry miss %s", digest[:16])
        if not self.writes:
            return make_session(data, optimize=level)
        return self._build_and_store(data, digest, level)

    def _build_and_store(self, data: bytes, digest: str, level):
        if level in STORED_AS_IS:  # no entry of its own: only a bundle keeps it (see STORED_AS_IS)
            sess = make_session(data, optimize=level)
            self.payloads[digest] = (False, data)
            return sess
        tmp = self._scratch_file()
        if tmp is None:
            return make_session(data, optimize=level)
        so = session_options(level)
        so.optimized_model_filepath = tmp
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=DISABLED_OPTIMIZERS)
        try:
            with open(tmp, "rb") as fh:
                optimised = fh.read()
        except OSError:
            optimised = b""
        if optimised:
            self.store.put("kernel", keys.kernel_key(digest, level), {"level": level, "optimized": True},
                           optimised)
            self.payloads[digest] = (True, optimised)
        return sess

    def _fresh_store(self) -> bool:
        """Whether the store had no kernel folder when this build first looked (an empty cache: every lookup
        would be a failed file open, ~80 µs each; entries this process queued since are still found)."""
        if self._fresh is None:
            self._fresh = not (self.store.base / "kernel").is_dir()
        return self._fresh

    def _scratch_file(self) -> str | None:
        """The scratch file of this build (made on first use, removed by :meth:`close`), or None when no
        folder can take one (the kernel is then built without storing its optimised model)."""
        if self._scratch is None:
            try:
                fd, self._scratch = tempfile.mkstemp(prefix="npuscope-kernel-", suffix=".onnx",
                                                     dir=_scratch_dir(self.store))
                os.close(fd)
            except OSError:
                return None
        return self._scratch

    def close(self) -> None:
        """Remove the scratch file (see :meth:`_scratch_file`)."""
        if self._scratch is not None:
            try:
                os.unlink(self._scratch)
            except OSError:
                pass
            self._scratch = None

    def payload(self, digest: str, level) -> tuple[bool, bytes] | None:
        """(optimised?, bytes) of a kernel this build made or loaded, else read from its entry."""
        if digest not in self.payloads and self.reads:
            got = self.store.get("kernel", keys.kernel_key(digest, level))
            if got is not None:
                self.payloads[digest] = (bool(got[0].get("optimized")), got[1])
        return self.payloads.get(digest)


# ---------------------------------------------------------------------- bundles
def recipe(kc: KernelCache, ek, plan, overflow_mode: str, memo: dict | None = None) -> dict | None:
    """What rebuilds ExecKernel ``ek`` without its ONNX model (None: a numpy kernel, or unknown session)."""
    made = kc.made.get(id(ek.session)) if ek.session is not None else None
    if made is None:
        return None
    return {"spec": spec_digest(ek.spec, plan, overflow_mode, memo), "digest": made[0], "level": made[1],
            "feeds": [list(f) for f in ek.feeds], "fetches": [list(f) for f in ek.fetches],
            "native": bool(ek.native_fp16)}


def pack_bundle(kc: KernelCache, recipes: list) -> tuple[dict, bytes] | None:
    """(meta, payload) of a bundle entry: the recipes and every kernel's entry bytes, concatenated."""
    blobs, parts, offset = {}, [], 0
    for r in recipes:
        if r is None or r["digest"] in blobs:
            continue
        got = kc.payload(r["digest"], r["level"])
        if got is None:
            return None
        optimised, data = got
        blobs[r["digest"]] = [offset, len(data), optimised]
        parts.append(data)
        offset += len(data)
    return {"kernels": recipes, "blobs": blobs}, b"".join(parts)


class Bundle:
    """A loaded bundle entry: recipes by kernel index, sessions made from its bytes on demand."""

    def __init__(self, meta: dict, payload: bytes, skip_nodes=frozenset()):
        self.recipes, self.blobs, self.payload = meta["kernels"], meta["blobs"], memoryview(payload)
        self.skip_nodes = set(skip_nodes)

    def get(self, i: int, spec, plan, overflow_mode: str, memo: dict) -> dict | None:
        r = self.recipes[i] if i < len(self.recipes) else None
        if r is None or (self.skip_nodes and self.skip_nodes & set(spec.exec_nodes)):
            return None
        return r if r["spec"] == spec_digest(spec, plan, overflow_mode, memo) else None

    def session(self, r: dict, kc: KernelCache):
        off, n, optimised = self.blobs[r["digest"]]
        data = bytes(self.payload[off:off + n])
        try:
            sess = _session_from_bytes(data, False if optimised else r["level"])
            kc.payloads[r["digest"]] = (optimised, data)
            return sess
        except Exception as exc:  # noqa: BLE001 - rebuilt the ordinary way
            LOG.warning("compile cache bundle kernel %s not loadable (%s); rebuilding it", r["digest"][:16],
                        str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
            return None


# ---------------------------------------------------------------------- one build
class Build:
    """The kernel cache during one build_kernels call. ``info`` (CompileResult.cache) names the compile:
    its bundle ``bundle/<compile key>`` gives every session kernel at once; a patched compile (info "base",
    "stale_nodes") uses its base compile's bundle for the kernels the patch did not touch."""

    def __init__(self, kc: KernelCache, info: dict | None, plan, overflow_mode: str):
        self.kc, self.info, self.plan, self.overflow = kc, info, plan, overflow_mode
        self.bundle, self.own = None, False
        if info and info.get("key") and kc.reads:
            got = kc.store.get("bundle", info["key"])
            if got is not None:
                self.bundle, self.own = Bundle(*got), True
            elif info.get("base"):
                got = kc.store.get("bundle", info["base"])
                if got is not None:
                    self.bundle = Bundle(*got, skip_nodes=info.get("stale_nodes", ()))
        self.from_bundle = 0
        self.memo: dict = {}  # id(spec) -> spec digest

    # ------------------------------------------------- toolkit.runtime.kernels.SessionSource
    def session(self, data: bytes, key: str, optimize):
        """The session of kernel model ``data`` from its entry, else built (and stored)."""
        return self.kc.session(data, key, optimize)

    def reused(self, sess, key: str, optimize) -> None:
        """``sess`` was already in this process (counted, and noted for the recipes)."""
        self.kc.in_memory += 1
        self.kc.note(sess, key, optimize)

    def made(self, sess, key: str, optimize) -> None:
        """``sess`` was just built or loaded through :meth:`session` (noted for the recipes)."""
        self.kc.note(sess, key, optimize)

    def close(self) -> None:
        self.kc.close()

    def from_recipe(self, i: int, spec, sessions: dict):
        """(session, feeds, fetches, native, digest) of kernel ``i`` from the bundle, or None."""
        r = self.bundle.get(i, spec, self.plan, self.overflow, self.memo) if self.bundle is not None else None
        if r is None:
            return None
        sess = sessions.get(r["digest"])
        if sess is not None:
            self.kc.in_memory += 1
        else:
            sess = self.bundle.session(r, self.kc)
            if sess is None:
                return None
            self.kc.hits += 1
            sessions[r["digest"]] = sess
        self.kc.note(sess, r["digest"], r["level"])
        self.from_bundle += 1
        return sess, [tuple(f) for f in r["feeds"]], [tuple(f) for f in r["fetches"]], r["native"], r["digest"]

    def finish(self, kernels: list) -> None:
        """Store this compile's bundle (unless every kernel came from it), evict, log and count."""
        kc = self.kc
        n_sessions = sum(1 for ek in kernels if ek.session is not None)
        if self.info and self.info.get("key") and kc.writes and not (self.own and self.from_bundle == n_sessions):
            recipes = [recipe(kc, ek, self.plan, self.overflow, self.memo) for ek in kernels]
            packed = None
            if all(r is not None for r, ek in zip(recipes, kernels) if ek.session is not None):
                packed = pack_bundle(kc, recipes)
            if packed is not None:
                kc.store.put("bundle", self.info["key"], *packed)
        if kc.writes and kc.misses:
            kc.store.evict_later()
        line = f"kernels: {kc.hits} hits, {kc.misses} misses" + (f", {kc.in_memory} already in memory"
                                                                if kc.in_memory else "")
        LOG.info("compile cache %s", line)
        if self.info is not None:
            self.info["kernel_hits"] = self.info.get("kernel_hits", 0) + kc.hits
            self.info["kernel_misses"] = self.info.get("kernel_misses", 0) + kc.misses
            self.info.setdefault("log", []).append(line)


def session_source(plan, info: dict | None, overflow_mode: str) -> "Build | None":
    """The compile cache's :class:`toolkit.runtime.kernels.SessionSource` for one build_kernels call over
    ``plan`` (``info``: the compile's CompileResult.cache record, or None), or None when the plan's config
    disables the cache. build_kernels calls its ``finish`` and then ``close``."""
    settings = from_config(plan.config)
    if settings.mode == "disable":
        return None
    kc = KernelCache(EntryStore(settings.root, settings.limit), settings.reads, settings.writes)
    return Build(kc, info, plan, overflow_mode)
