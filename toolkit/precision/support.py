"""What the simulated NPU cannot run: one table of op types, each with the reason and the usual fix.

A kernel holding one of these ops falls back to the host CPU automatically (``place_ops``), as operators
without an AI Core implementation run as AI_CPU tasks on real Ascend devices: in FP32, with host-device
copies (``MemcpyD2H`` / ``MemcpyH2D`` kernels) around it. Each fallback is reported as a ``cpu_fallback``
finding carrying the reason below. Kernels that read or write a non-tensor value (sequence, optional) or a
string tensor fall back too (:func:`unsupported_reason`), whatever their op type.

=====================  ==========================================================================
category               ops
=====================  ==========================================================================
control flow           If, Loop, Scan, SequenceMap (subgraphs are interpreted on the host)
sequence / optional    Sequence*, SplitToSequence, ConcatFromSequence, Optional* (host values)
data-dependent shape   NonZero, Unique, NonMaxSuppression, Compress (output size known only at run time)
string                 StringNormalizer, StringConcat, StringSplit, RegexFullMatch
random                 RandomNormal(Like), RandomUniform(Like), Multinomial, Bernoulli, Dropout
recurrent              RNN, GRU, LSTM (time-step loop on the host in this simulation)
=====================  ==========================================================================

Every op of the numerics contract's ``control`` class (toolkit.precision.contract.CONTROL) is in the table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Unsupported:
    """Why the simulated NPU has no kernel for an op (``reason``) and what usually keeps a model on the NPU
    (``fix``)."""

    category: str
    reason: str
    fix: str


_CONTROL = Unsupported("control flow", "control flow: its subgraphs are interpreted on the host (AI_CPU)",
                       "unroll or remove the control flow at export time (e.g. a static loop count) or keep it on "
                       "the CPU and accept the host-device copies")
_SEQUENCE = Unsupported("sequence", "sequence / optional values live in host memory",
                        "export with tensors instead of sequences (e.g. Split/Concat over a fixed count)")
_DYNAMIC = Unsupported("data-dependent shape", "its output size depends on the input values, so it cannot be "
                                               "planned in the device arena",
                       "keep it on the CPU (post-processing), or replace it with a fixed-size equivalent "
                       "(e.g. a mask multiply or TopK with a fixed k)")
_STRING = Unsupported("string", "string tensors are host values", "do string processing outside the model")
_RANDOM = Unsupported("random", "random number generation runs on the host",
                      "remove random ops for inference (e.g. export Dropout in eval mode)")
_RECURRENT = Unsupported("recurrent", "recurrent layers run their time-step loop on the host in this simulation",
                         "accept the CPU placement, or export the recurrence unrolled into MatMul/Add ops")

#: {op type: Unsupported} — ops the simulated NPU declares unsupported (default ONNX domain).
UNSUPPORTED: dict[str, Unsupported] = {
    **dict.fromkeys(("If", "Loop", "Scan", "SequenceMap"), _CONTROL),
    **dict.fromkeys(("SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase", "SequenceLength",
                     "SequenceEmpty", "SplitToSequence", "ConcatFromSequence", "Optional", "OptionalGetElement",
                     "OptionalHasElement"), _SEQUENCE),
    **dict.fromkeys(("NonZero", "Unique", "NonMaxSuppression", "Compress"), _DYNAMIC),
    **dict.fromkeys(("StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch"), _STRING),
    **dict.fromkeys(("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "Dropout"), _RANDOM),
    **dict.fromkeys(("RNN", "GRU", "LSTM"), _RECURRENT),
}

#: Reason given for a kernel that reads or writes a non-tensor or string value.
HOST_VALUE = Unsupported("host value", "it reads or writes a non-tensor (sequence / optional) or string value, "
                                       "which lives in host memory", _SEQUENCE.fix)


def unsupported(op_type: str, domain: str = "") -> Unsupported | None:
    """The table entry of ``op_type`` (None: the NPU runs it). Ops of other domains are not in the table."""
    if domain not in ("", "ai.onnx"):
        return None
    return UNSUPPORTED.get(op_type)


def unsupported_reason(node, host_values: bool) -> Unsupported | None:
    """Why the NPU cannot run ``node`` (an onnx.NodeProto): its op type's table entry, else
    :data:`HOST_VALUE` when ``host_values`` (it touches a sequence, optional or string value), else None."""
    entry = unsupported(node.op_type, node.domain)
    if entry is None and host_values:
        return HOST_VALUE
    return entry
