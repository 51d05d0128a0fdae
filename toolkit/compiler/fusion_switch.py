"""The converter's fusion switch file (``fusion_switch_file``): parse and check it.

Format (the converter's ``--fusion_switch_file`` JSON)::

    {"Switch": {"GraphFusion": {"ALL": "on" | "off", "<PassName>": "on" | "off", ...},
                "UBFusion":    {"ALL": "on" | "off", "<PassName>": "on" | "off", ...}}}

Pass names at each level, checked by :func:`check`:

- a pass npuscope simulates (:func:`simulated_passes`: the graph-fusion rules of toolkit.compiler.rules and
  BatchNorm folding under GraphFusion, buffer fusion under UBFusion): switched as written;
- a known pass under the other level (e.g. a UBFusion pass under GraphFusion): a ConfigError saying where it
  belongs;
- a name close to a simulated pass of the level (difflib ratio >= 0.8, e.g. ``LayerNormFusionPas``): a
  ConfigError with the suggestion (ignoring a misspelt simulated pass would silently leave it on);
- any other name shaped like a converter pass name (:data:`PASS_NAME`: an identifier ending in ``Pass`` or
  ``Fusion``, as every name of the converter's pattern list does): a converter pass npuscope does not simulate,
  accepted and ignored with a warning ("not simulated; ignored"), so switch files copied from the converter
  load whatever passes they name (the converter has hundreds); the warning says when the name is also not in
  :data:`CONVERTER_PASSES` (so a misspelling of a converter pass is visible);
- anything else: a ConfigError listing the simulated passes.

:data:`CONVERTER_PASSES` is a small, not exhaustive list of passes the converter documents. Source: the converter's reference "Graph Fusion and
UB Fusion Patterns" (CANN documentation, graphubfusionref pages, and its "Fusion Pattern List"), and the
examples of the ``--fusion_switch_file`` option page (RequantFusionPass, TbeConvDequantVaddReluQuantFusionPass,
TbeConvDequantQuantFusionPass, TbePool2dQuantFusionPass). One exception: ``V100NotRequireFusionPass`` was
reported from a user's converter switch file and is not on those pages. Add a name here (one place) when a
converter switch file names a pass it lacks.
"""

from __future__ import annotations

import difflib
import json
import logging
import re

from toolkit.compiler.passes.buffer_fusion import RULE as UB_RULE
from toolkit.compiler.passes.fold_batchnorm import RULE as BN_RULE
from toolkit.compiler.rules import load_rules
from toolkit.core.errors import ConfigError
from toolkit.core.records import Finding
from toolkit.core.text import suggest

#: Levels of the fusion switch file.
FUSION_LEVELS = ("GraphFusion", "UBFusion")
#: The shape every error about the file shows.
SWITCH_SHAPE = '{"Switch": {"GraphFusion": {...}, "UBFusion": {...}}}'
#: Smallest difflib ratio at which an unknown pass name gets a "did you mean" suggestion.
SUGGEST_CUTOFF = 0.8

#: The shape of a converter fusion pass name (module docstring): ``SoftmaxFusionPass``, ``AutomaticUbFusion``.
PASS_NAME = re.compile(r"[A-Z][A-Za-z0-9_]*(Pass|Fusion)")

#: Converter fusion passes npuscope does not simulate, per level (see the module docstring for the source).
CONVERTER_PASSES: dict[str, frozenset[str]] = {
    "GraphFusion": frozenset({
        "AABiasaddConvFusion", "AAMatMulNzToNdFusionPass", "ADepthwiseFusionPass", "AReduceMeanFusionPass",
        "AReduceSumFusionPass", "AddNFusionPass", "BatchMatMulFusionPass", "BatchNormBnInferFusionPass",
        "CastRemoveFusionPass", "ConstToAttrPass", "ConvScaleFusionPass", "ConvWeightCompressFusionPass",
        "DepthwiseFusionPass", "RequantFusionPass", "SameInputConv2dPass", "SplitConvConcatFusionPass",
        "V100NotRequireFusionPass",
    }),
    "UBFusion": frozenset({
        "AutomaticUbFusion", "MatmulConfusiontransposeUbFusion", "TbeBatchMatmulElementWiseFusionPass",
        "TbeConv2DReluv2Pass", "TbeConvBnreduceFusionPass", "TbeConvDequantQuantFusionPass",
        "TbeConvDequantVaddReluQuantFusionPass", "TbeDepthwiseConvElemwiseFusionPass",
        "TbeDynamicElemwiseBroadcastFusionPass", "TbeDynamicElemwiseReduceFusionPass", "TbeEltwiseCastFusionPass",
        "TbeEltwiseFusionPass", "TbeEltwiseQuantFusionPass", "TbeElemwiseQuantFusionPass",
        "TbeMultiOutputFusionPass", "TbePool2dQuantFusionPass", "TbeReduceElemwiseFusionPass",
    }),
}

_log = logging.getLogger("npuscope.config")
_warned: set[tuple[str, str]] = set()


def simulated_passes(level: str) -> list[str]:
    """Pass names npuscope implements at ``level`` (GraphFusion: BatchNorm folding and the graph-fusion rules;
    UBFusion: buffer fusion)."""
    if level == "UBFusion":
        return [UB_RULE]
    return [BN_RULE] + [r.name for r in load_rules()]


def level_of(name: str) -> str | None:
    """The level a known pass (simulated or in :data:`CONVERTER_PASSES`) belongs to, or None."""
    for level in FUSION_LEVELS:
        if name in CONVERTER_PASSES[level] or name in simulated_passes(level):
            return level
    return None


def ignored_passes(sw: dict | None) -> list[tuple[str, str, str]]:
    """(level, pass name, state) of every converter pass ``sw`` switches that npuscope does not simulate (any
    entry of a known level but "ALL" and the simulated passes; :func:`check` refused the rest already)."""
    table = (sw or {}).get("Switch", {}) if isinstance(sw, dict) else {}
    return [(level, name, state) for level, passes in table.items() if level in FUSION_LEVELS
            and isinstance(passes, dict) for name, state in passes.items()
            if name != "ALL" and name not in simulated_passes(level)]


def _unknown(level: str, name: str, where: str) -> ConfigError:
    home = level_of(name)
    if home is not None and home != level:
        return ConfigError(f"{where}: fusion switch names '{name}' under \"{level}\", but it is a {home} pass; "
                           f"move it under \"{home}\"")
    simulated = simulated_passes(level)
    close = difflib.get_close_matches(name, simulated, n=1, cutoff=SUGGEST_CUTOFF)
    if close:
        return ConfigError(f"{where}: fusion switch names an unknown {level} pass '{name}' (did you mean "
                           f"'{close[0]}'?); pass names are case-sensitive")
    return ConfigError(f"{where}: fusion switch {level} entry '{name}' is not a pass name (a converter pass "
                       f"name is an identifier ending in Pass or Fusion, e.g. '{simulated[-1]}'; simulated {level} "
                       f"passes: {', '.join(simulated)}); \"ALL\" switches every pass of the level")


def _refused(level: str, name: str) -> bool:
    """True when ``name`` under ``level`` is not a pass the switch file may name (module docstring)."""
    if name == "ALL" or name in simulated_passes(level):
        return False
    home = level_of(name)
    if home is not None:
        return home != level
    return bool(difflib.get_close_matches(name, simulated_passes(level), n=1, cutoff=SUGGEST_CUTOFF)) \
        or not PASS_NAME.fullmatch(name)


def check_config(config) -> list[str]:
    """:func:`check` of ``config.fusion_switch_file``, its errors naming where the option came from (a config
    file, the command line). Called where a config is used: the commands (toolkit.commands.common.load_config)
    and every compile (toolkit.compiler.pipeline.bind). Raises ConfigError."""
    return check(config.fusion_switch_file, config.origin("fusion_switch_file"))


def check(sw, where: str) -> list[str]:
    """Refuse a fusion switch file that is not {"Switch": {level: {pass name or "ALL": "on" | "off"}}} (every
    level's type, level and pass names, every value: module docstring). Returns one warning line per converter
    pass npuscope does not simulate (also logged once per process on logger ``npuscope.config``).

    Raises:
        ConfigError: the shape, a level, a pass name or a value is wrong (the message says which and how to fix).
    """
    if not sw:
        return []
    if set(sw) != {"Switch"} or not isinstance(sw["Switch"], dict):
        raise ConfigError(f"{where}: fusion_switch_file must be {SWITCH_SHAPE}")
    for level, passes in sw["Switch"].items():
        if level not in FUSION_LEVELS:
            raise ConfigError(f"{where}: fusion switch level '{level}'{suggest(level, FUSION_LEVELS)}")
        if not isinstance(passes, dict):
            raise ConfigError(f"{where}: fusion_switch_file must be {SWITCH_SHAPE}; \"{level}\" is "
                              f"{json.dumps(passes)}, expected an object {{pass name or \"ALL\": \"on\" | \"off\"}}")
        for pname, state in passes.items():
            if _refused(level, pname):
                raise _unknown(level, pname, where)
            if not isinstance(state, str) or state not in ("on", "off"):
                raise ConfigError(f"{where}: fusion switch {level} '{pname}' = {json.dumps(state)}; "
                                  "expected \"on\" or \"off\"")
    return [_warn_once(level, name, state) for level, name, state in ignored_passes(sw)]


def warning_text(level: str, name: str, state: str) -> str:
    """The warning for converter pass ``name`` npuscope does not implement (saying so when the name is not in
    :data:`CONVERTER_PASSES` either)."""
    known = "" if name in CONVERTER_PASSES.get(level, ()) else \
        " (a name npuscope does not know: check its spelling against the converter's fusion pattern list)"
    return (f"fusion switch {level} '{name}' = \"{state}\": a converter pass npuscope does not implement "
            f"(not simulated; ignored){known}")


def _warn_once(level: str, name: str, state: str) -> str:
    text = warning_text(level, name, state)
    if (level, name) not in _warned:
        _warned.add((level, name))
        _log.warning("%s", text)
    return text


def findings(config) -> tuple[list[str], list]:
    """(compile-log lines, warning Findings of kind ``fusion_switch_ignored``) for the converter passes
    ``config.fusion_switch_file`` switches that npuscope does not simulate; for the pass that applies the
    switch file to call (e.g. graph_fusion)."""
    lines, out = [], []
    for level, name, state in ignored_passes(getattr(config, "fusion_switch_file", None)):
        text = warning_text(level, name, state)
        lines.append(f"WARNING {text}")
        out.append(Finding("warning", "fusion_switch_ignored", name, {"level": level, "pass": name, "state": state},
                           f"{text}; the simulated compile is the same with or without this entry"))
    return lines, out
