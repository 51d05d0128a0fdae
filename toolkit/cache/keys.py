"""Cache keys: sha256 over everything that changes what the compiler or a kernel build produces.

- :func:`versions`: npuscope's version plus a digest of its own source files (path, size, mtime) (code changes between releases
  invalidate entries too), onnxruntime, onnx, onnxscript, numpy and Python versions.
- :func:`machine`: CPU architecture and instruction-set flags; part of kernel keys only, because onnxruntime's
  optimised kernel models (NCHWc layouts) are specific to the CPU they were optimised on.
- :class:`Manifest`: per-node and per-initializer digests of the model to compile (after input shapes are
  bound): ``full`` digests cover values (weights by digest, attribute values), ``struct`` digests only names,
  op types, wiring, attribute names, tensor dtypes and dims. The family key hashes the structural ones, so
  a model that differs from a cached one only in some values finds it (toolkit.cache.patch). A manifest is
  made only when the exact entry misses (or to store one).
- :func:`compile_key`: the whole bound model's deterministic serialisation (every node, weight and other
  field; weights left on disk by the loader by their data files' streamed sha256, toolkit.ir.weights), the config fields that change code, skipped passes, the registered passes/rules and the versions.
  One sha256 over the model's bytes (~3 ms on PP-OCRv4 det) instead of one per node and weight (~6 ms).
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from dataclasses import dataclass
from pathlib import Path

import onnx

import toolkit
from toolkit.compiler import stages
from toolkit.compiler.registry import PASSES
from toolkit.compiler.rules import load_rules
from toolkit.core.env import dist_version
from toolkit.ir.proto import copy_fields
from toolkit.ir.weights import data_digest, file_digest_of, has_mapped, is_mapped

#: Config fields that choose where/whether to cache, not what is compiled: left out of every key.
NON_CODE_FIELDS = frozenset({"op_compiler_cache_mode", "op_compiler_cache_dir"})


class Uncacheable(ValueError):
    """The model cannot be keyed (e.g. a tensor still refers to external data)."""


def _sha(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8") if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()


@functools.cache
def _source_digest() -> str:
    """sha256 over the path, size and modification time (ns) of every .py file of the installed toolkit
    package: an edited, reinstalled or checked-out file changes it. Stat instead of reading the ~200 files
    (~1 ms instead of ~13 ms in a new process); a file touched without a change only costs a recompile."""
    root = Path(toolkit.__file__).parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        st = p.stat()
        h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


@functools.cache
def _versions() -> tuple[tuple[str, str], ...]:
    import numpy
    import onnxruntime

    folder = dist_version("onnxscript") or "?"  # the constant folder; not imported just to read its version
    return (("npuscope", f"{toolkit.__version__}+{_source_digest()}"), ("onnxruntime", onnxruntime.__version__),
            ("onnx", onnx.__version__), ("onnxscript", folder), ("numpy", numpy.__version__),
            ("python", platform.python_version()))


def _code_digest(fn) -> str:
    """Module, qualified name and bytecode/constants of a function (a pass or rule replaced at run time, e.g.
    by a test or a plugin, changes it even though no source file changed)."""
    code = getattr(fn, "__code__", None)
    body = _code_text(code) if code is not None else type(fn).__qualname__
    return _sha(getattr(fn, "__module__", "") or "", getattr(fn, "__qualname__", "") or "", body)[:16]


def _code_text(code) -> str:
    """A process-independent text of a code object: bytecode, names and constants, nested code objects
    (lambdas, comprehensions) by their own text, never by repr (which holds a memory address)."""
    consts = [_code_text(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return repr((code.co_code.hex(), code.co_names, consts))


def registry_digest() -> str:
    """sha256 over the registered compiler passes and graph-fusion rules as they are now (names, order,
    functions): part of every compile key, so a pass or rule registered or replaced in this process after
    import cannot be served an entry compiled without it. The same in every process whatever the order its
    modules were imported in (passes by name, the stages in their order, rules in load_rules' order). Not cached:
    registries may change at run time."""
    order = stages.STRUCTURE + ("|",) + stages.PRECISION
    parts = [f"order:{','.join(order)}"]
    # by name: PASSES fills in the order the pass modules happened to be imported, which differs between
    # processes (a test importing one pass module first gave its process other keys than a fresh one)
    parts += [f"pass:{n}:{p.min_level}:{p.switch}:{_code_digest(p.fn)}" for n, p in sorted(PASSES.items())]
    parts += [f"rule:{r.name}:{r.level}:{sorted(r.anchors)}:{_code_digest(r.match)}" for r in load_rules()]
    return _sha(*parts)


def versions() -> dict[str, str]:
    """{package: version} that every key includes (see module docstring)."""
    return dict(_versions())


@functools.cache
def machine() -> str:
    """CPU architecture plus a digest of the CPU's feature flags (from /proc/cpuinfo where available)."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    except OSError:
        flags = platform.processor()
    return f"{platform.machine()}:{_sha(flags)[:16]}"


def code_config(config) -> dict:
    """The config fields that change compiled code (all but NON_CODE_FIELDS), as a plain dict."""
    d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    return {k: v for k, v in d.items() if k not in NON_CODE_FIELDS}


# ---------------------------------------------------------------------- model manifest
def _rest_digest(model: onnx.ModelProto) -> str:
    """Digest of the model without its nodes and initializers (IR version, opsets, functions, graph inputs,
    outputs, value infos, sparse initializers, metadata)."""
    g = copy_fields(model.graph, onnx.GraphProto(), skip=("node", "initializer"))
    top = copy_fields(model, onnx.ModelProto(), skip=("graph",))
    return _sha(top.SerializeToString(deterministic=True), g.SerializeToString(deterministic=True))


def _node_struct(node: onnx.NodeProto) -> str:
    attrs = []
    for a in node.attribute:
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            attrs.append([a.name, a.type, _sha(a.SerializeToString(deterministic=True))])  # bodies are structure
        elif a.type == onnx.AttributeProto.TENSOR:
            attrs.append([a.name, a.type, a.t.data_type, list(a.t.dims)])
        else:
            attrs.append([a.name, a.type])
    return repr((node.name, node.op_type, node.domain, tuple(node.input), tuple(node.output), attrs))


@dataclass
class Manifest:
    """Digests of a model to compile; ``nodes``: [name, full, struct] in graph order; ``inits``:
    {name: [full, struct]}; ``rest``: digest of everything else."""

    rest: str
    nodes: list
    inits: dict

    @classmethod
    def of(cls, model: onnx.ModelProto) -> "Manifest":
        """Raises Uncacheable when a tensor's data is not inside the model (external data)."""
        check_cacheable(model)
        nodes = [[n.name, _sha(n.SerializeToString(deterministic=True)), _sha(_node_struct(n))]
                 for n in model.graph.node]
        inits = {}
        for t in model.graph.initializer:  # a weight left on disk: its reference and its data file's digest
            full = t.SerializeToString(deterministic=True) + (file_digest_of(t).encode() if is_mapped(t) else b"")
            inits[t.name] = [_sha(full),
                             _sha(json.dumps([t.name, t.data_type, list(t.dims)]))]
        return cls(_rest_digest(model), nodes, inits)

    def to_dict(self) -> dict:
        return {"rest": self.rest, "nodes": self.nodes, "inits": self.inits}

    @classmethod
    def from_dict(cls, d: dict) -> "Manifest":
        return cls(d["rest"], d["nodes"], d["inits"])

    def family_key(self, config, disabled=()) -> str:
        """Key shared by models that differ from this one only in attribute values and weight values."""
        body = {"rest": self.rest, "nodes": [n[2] for n in self.nodes],
                "inits": sorted((k, v[1]) for k, v in self.inits.items()), **_compile_options(config, disabled)}
        return _sha("family", json.dumps(body, sort_keys=True, default=str))


def _compile_options(config, disabled) -> dict:
    return {"config": code_config(config), "disabled": sorted(disabled), "versions": versions(),
            "registry": registry_digest()}


def check_cacheable(model: onnx.ModelProto) -> None:
    """Raises Uncacheable when a tensor's data is neither inside the model nor a weight the loader left on disk
    (toolkit.ir.weights: those are keyed by their data files' streamed digests)."""
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL and not is_mapped(t):
            raise Uncacheable(f"initializer '{t.name}' refers to external data")


def compile_key(model: onnx.ModelProto, config, disabled=(), file_digest=None) -> str:
    """Key of a compile entry (module docstring): the bound model (every node and weight, the graph's inputs
    with their shapes as bound, outputs, opsets, metadata), the config fields that change code, the passes
    skipped, the registered passes and rules, the versions. ``file_digest``: how a weight data file not yet
    hashed in this process gets its sha256 (toolkit.ir.weights.data_digest; e.g.
    toolkit.cache.file_digests.FileDigests.digest). Raises Uncacheable (external data)."""
    check_cacheable(model)
    body = hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()
    if has_mapped(model):  # the proto holds only the weights' offsets: add their files' contents, streamed
        body = _sha(body, data_digest(model, file_digest))
    return _sha("compile", body, json.dumps(_compile_options(config, disabled), sort_keys=True, default=str))


def kernel_key(model_digest: str, level) -> str:
    """Key of a kernel entry: the kernel model's sha256 (its subgraph, constants included), onnxruntime's
    optimisation level, the versions and the machine (optimised models are CPU-specific)."""
    return _sha("kernel", model_digest, str(level), _versions_json(tuple(sorted(versions().items()))), machine())


@functools.lru_cache(maxsize=8)
def _versions_json(items: tuple) -> str:
    """json.dumps of the versions, once per distinct value (a build makes ~200 kernel keys)."""
    return json.dumps(dict(items), sort_keys=True)
