"""The converter's precision options as data: keep_dtype entries, modify_mixlist edits, implmode per op type.

keep_dtype (the converter's ``--keep_dtype`` file: one entry per line, kept in their original precision, here
FP32). Source: the converter's option reference ("--keep_dtype": "the names of the operators, or their types
as ``OpType::TypeName``, one per line"); ``OpName::name`` is accepted as an explicit node name, as the
converter's operator-name entries are written in its ``--customize_dtypes`` file. Entry forms:

=====================  ======================================================================
``name``               the node named ``name`` (an ONNX node name of the model)
``OpName::name``       the same, with the converter's explicit prefix (``OpName::`` is dropped)
``OpType::TypeName``   every node of ONNX op type ``TypeName`` (case-sensitive: ``Softmax``)
=====================  ======================================================================

modify_mixlist (``--modify_mixlist``): ``{"black-list" | "white-list" | "gray-list": {"to-add": [op types],
"to-remove": [op types]}}``; only ``precision_mode = allow_mix_precision`` reads it.

optypelist_for_implmode (``--optypelist_for_implmode``): ``op_select_implmode`` applies to the listed op types
only; every other op keeps the default implementation mode, ``high_performance`` (the converter's default).
"""

from __future__ import annotations

from toolkit.config.keep_dtype import parse_keep_entry
from toolkit.precision.contract import default_mixlists

#: The converter's default op_select_implmode (op types not in optypelist_for_implmode keep it).
DEFAULT_IMPLMODE = "high_performance"
#: precision_mode values that read modify_mixlist.
MIXLIST_MODES = ("allow_mix_precision",)
#: precision_mode values under which keep_dtype changes nothing: force_fp32 (every kernel FP32 already) and
#: must_keep_origin_dtype (every kernel keeps the dtype its tensors have in the model).
ALL_FP32_MODES = ("force_fp32", "must_keep_origin_dtype")


def keep_sets(entries: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """({node name: entry text}, {op type: entry text}) of keep_dtype ``entries``."""
    names, types = {}, {}
    for text in entries:
        e = parse_keep_entry(text)
        (types if e.kind == "type" else names).setdefault(e.value, e.text)
    return names, types


def mixlists(modify: dict | None) -> dict[str, set[str]]:
    """The allow_mix_precision lists after ``modify`` (modify_mixlist): {"white-list", "black-list",
    "gray-list": set of op types}. An op added to one list leaves the others."""
    lists = default_mixlists()
    for key, edits in (modify or {}).items():
        lists[key] |= set(edits.get("to-add", []))
        lists[key] -= set(edits.get("to-remove", []))
        for other in lists:
            if other != key:
                lists[other] -= set(edits.get("to-add", []))
    return lists


def mixlist_entries(modify: dict | None) -> list[tuple[str, str, str]]:
    """Every (list, action, op type) edit of ``modify``, in file order, e.g. ("black-list", "to-add", "MatMul")."""
    return [(key, action, op) for key, edits in (modify or {}).items() for action, ops in edits.items() for op in ops]


def implmode_of(op_types: set[str], select: str, optypes: list[str]) -> str:
    """The implementation mode of a kernel whose ONNX op types are ``op_types``: ``select``
    (op_select_implmode) when ``optypes`` (optypelist_for_implmode) is empty or names one of them, else
    :data:`DEFAULT_IMPLMODE`."""
    if not optypes or op_types & set(optypes):
        return select
    return DEFAULT_IMPLMODE
