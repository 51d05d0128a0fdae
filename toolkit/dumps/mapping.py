"""The fusion mapping file: which original ONNX nodes a fused device op stands for.

Format (JSON)::

    {"fused_device_op_name": ["orig_node_a", "orig_node_b", "orig_node_c"], ...}

Keys are device op names as they appear in the target's dump file names; values list the original node names
in execution order. The device op's output ``i`` is compared with output ``i`` of the LAST original node
(``orig_node_c``): a fused op writes what its last node produced. The other originals' outputs never leave the
device, so their rows read "fused into <op>" (like compare's "fused into kernel" rows) unless the target also
holds a dump of their own.
"""

from __future__ import annotations

import json
from pathlib import Path

from toolkit.core.boundedjson import json_loads, read_limited
from toolkit.core.errors import InputError
from toolkit.core.text import suggest
from toolkit.core.userpaths import check_path

_SHAPE = 'expected {"device_op": ["orig_node", ...], ...}'


def load_mapping(path: str | Path) -> dict[str, list[str]]:
    """Read and check a mapping file; returns {device op: [original node names]} in file order.

    Raises:
        InputError: missing/unreadable file, invalid JSON, not an object, a value that is not a non-empty list
            of non-empty strings, or an original node listed under two device ops; a path the file system refuses
            (toolkit.core.userpaths.check_path: a name too long, a symbolic link loop, a file on the way,
            permission denied).
    """
    p = Path(path)
    where = f"mapping file '{p}'"
    check_path(p, "mapping file", InputError, f"give a JSON file {_SHAPE}")
    if not p.exists() or p.is_dir():
        raise InputError(f"{where} {'is a folder' if p.is_dir() else 'does not exist'}; give a JSON file {_SHAPE}")
    text = read_limited(p, "mapping file", InputError, f"give a UTF-8 JSON file {_SHAPE}",  # a BOM is fine
                        limit="artifact")  # a FIFO or a link to /dev/zero is refused, never read
    try:
        data = json_loads(text, where, InputError)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                         f"{_SHAPE}") from None
    if not isinstance(data, dict):
        raise InputError(f"{where} holds a JSON {type(data).__name__}; {_SHAPE}")
    return _checked(data, where)


def _checked(data: dict, where: str) -> dict[str, list[str]]:
    owner: dict[str, str] = {}
    for op, nodes in data.items():
        if not op:
            raise InputError(f"{where}: an empty device op name; {_SHAPE}")
        if not isinstance(nodes, list) or not nodes or not all(isinstance(n, str) and n for n in nodes):
            raise InputError(f"{where}: '{op}' maps to {json.dumps(nodes)[:80]}; expected a non-empty list of "
                             "original node names")
        for n in nodes:
            if n in owner and owner[n] != op:
                raise InputError(f"{where}: node '{n}' is listed under both '{owner[n]}' and '{op}'; "
                                 "a node is fused into one device op")
            owner[n] = op
    return {op: list(nodes) for op, nodes in data.items()}


def check_mapping_model(mapping: dict[str, list[str]], nodes, where: str, model: str) -> None:
    """Refuse an original node name of ``mapping`` that is not one of ``nodes`` (the node names of ``--model``):
    a typo would otherwise silently leave the fused op uncompared.

    Raises:
        InputError: one line naming the mapping file, the device op, the unknown node and the closest model node.
    """
    known = set(nodes)
    for op, originals in mapping.items():
        for n in originals:
            if n not in known:
                raise InputError(f"{where}: '{op}' lists node '{n}', which is not a node of --model '{model}'"
                                 f"{suggest(n, sorted(known)) if known else ''}; list the model's original node "
                                 "names")
