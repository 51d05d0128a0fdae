"""The one condition grammar (toolkit.compare.metrics.grammar) and what each consumer makes of a string: abnormal
lines (--thresholds), tune's target, regress's tolerance, a policy's [outputs] strings, --atol / --rtol.

Expected values are computed here from the definitions (a max |x - y| of exactly 0.5, the cosine of identical
vectors exactly 1, math.nextafter for the strict forms), never read back from the code under test."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from toolkit.compare.metrics import METRICS, compare_tensors, parse_thresholds
from toolkit.compare.metrics.grammar import SHORT_FORMS, parse_conditions, with_shorthands
from toolkit.core.errors import ConfigError, UsageError
from toolkit.signoff.criteria import Evidence, check_outputs
from toolkit.signoff.limits import output_limits
from toolkit.signoff.policy import policy_from_dict
from toolkit.signoff.regress import DEFAULT_TOLERANCE, layer_changes, parse_tolerance
from toolkit.tuning.tune import format_target, parse_target

# x = device, y = golden: |x - y| = [0, 0.5] exactly, so MaxAbsoluteError is exactly 0.5, and x/y - 1 = [0, 2^-8]
# exactly (128.5 / 128 = 1 + 1/256), so MaxRelativeError is exactly 0.00390625; every default line holds (RED
# 0.5 / |y| = 0.0035 < 0.05, RMSE sqrt(0.125) < 1, cosine > 0.99, MeanRelativeError 2^-9 < 1)
X, Y = np.array([64.0, 128.5]), np.array([64.0, 128.0])


def abnormal(text, x=X, y=Y, tensor=None) -> bool:
    return bool(compare_tensors(x, y, thresholds=text, tensor=tensor)["Abnormal"])


# ------------------------------------------------------------------------------ one line, several spellings
@pytest.mark.parametrize("text, is_abnormal", [
    ("MaxAbsoluteError<=0.5", False),  # requirement, inclusive: 0.5 meets it
    ("MaxAbsoluteError<0.5", True),    # requirement, strict: 0.5 does not
    ("MaxAbsoluteError>0.5", False),   # the abnormal side (compare tool's form): 0.5 is not above 0.5
    ("MaxAbsoluteError>=0.5", True),   # the abnormal side, inclusive: 0.5 is abnormal
    ("MaxAbsoluteError=0.5", False),   # a bound in the metric's own direction, as a policy writes it
    ("MaxAbsoluteError<=0.4999", True),
])
def test_every_operator_on_a_value_exactly_on_the_line(text, is_abnormal):
    assert abnormal(text) is is_abnormal
    (c,) = parse_conditions(text)
    assert c.holds(0.5) is (not is_abnormal)  # the requirement agrees with the line


def test_identical_tensors_and_strict_cosine():
    y = np.array([0.25, -1.5, 3.0])  # identical tensors: a cosine of exactly 1.0
    assert not abnormal("CosineSimilarity>=1", y, y) and not abnormal("CosineSimilarity<1", y, y)
    assert abnormal("CosineSimilarity>1", y, y) and abnormal("CosineSimilarity<=1", y, y)


@pytest.mark.parametrize("spellings", [
    ["CosineSimilarity<0.999", "CosineSimilarity>=0.999", "CosineSimilarity=0.999", "Cosine>=0.999", "cos<0.999"],
    ["MaxAbsoluteError>1e-2", "MaxAbsoluteError<=0.01", "MaxAbsErr<=1e-2", "MaxAbsoluteError=0.01"],
    ["RootMeanSquareError>2", "RMSE<=2"],
    ["RelativeEuclideanDistance>0.1", "RED<=0.1"],
])
def test_spellings_of_one_line_give_one_line_everywhere(spellings):
    metric = parse_conditions(spellings[0])[0].metric
    lines = {s: parse_thresholds(s)[metric] for s in spellings}
    targets = {s: tuple(parse_target(s)[0]) for s in spellings}
    limits = {s: policy_from_dict({"outputs": {"*": s}}).section("outputs")["*"][metric] for s in spellings}
    value = float(re.split(r"[<>=]+", spellings[0])[-1])
    assert set(lines.values()) == {value} and set(limits.values()) == {value}
    good = ">=" if METRICS[metric].direction == "higher_is_better" else "<="
    assert set(targets.values()) == {(metric, good, value)}


def test_strict_forms_are_the_neighbouring_double():
    t = parse_thresholds("CosineSimilarity>0.5,MaxAbsoluteError<0.25")
    assert t["CosineSimilarity"] == math.nextafter(0.5, 1.0) and t["MaxAbsoluteError"] == math.nextafter(0.25, 0.0)
    assert METRICS["CosineSimilarity"].is_abnormal(0.5, t["CosineSimilarity"])
    assert not METRICS["CosineSimilarity"].is_abnormal(math.nextafter(0.5, 1.0), t["CosineSimilarity"])
    assert parse_target("CosineSimilarity<=0.5") == [("CosineSimilarity", ">", 0.5)]  # abnormal at or below: > 0.5


def test_short_forms_resolve_to_the_metric_names():
    assert set(SHORT_FORMS.values()) <= set(METRICS)
    for short, name in SHORT_FORMS.items():
        assert parse_conditions(f"{short}=off")[0].metric == name
    assert "RootMeanSquareError" not in parse_thresholds("RMSE=off")


# ------------------------------------------------------------------------------ per output / tensor
def test_a_prefixed_item_is_for_that_tensor_only():
    text = "logits:MaxAbsoluteError<=0.1"
    assert abnormal(text, tensor="logits") and not abnormal(text, tensor="other") and not abnormal(text)
    lines = parse_thresholds("MaxAbsoluteError<=1, logits:MaxAbsoluteError<=0.1, logits:RMSE=off")
    assert lines["MaxAbsoluteError"] == 1 and "RootMeanSquareError" in lines
    own = lines.for_tensor("logits")
    assert own["MaxAbsoluteError"] == 0.1 and "RootMeanSquareError" not in own
    assert own["CosineSimilarity"] == lines["CosineSimilarity"]  # the common lines reach it too


def test_output_names_may_hold_colons_and_star_is_every_output():
    (c,) = parse_conditions("input:0:CosineSimilarity>=0.9")
    assert (c.output, c.metric, c.value) == ("input:0", "CosineSimilarity", 0.9)
    assert parse_conditions("*:RMSE<=1")[0].output is None


def test_tune_target_per_output_replaces_the_common_condition_there():
    target = parse_target("CosineSimilarity>=0.9999, y:CosineSimilarity>=0.9, MaxAbsErr=off")
    assert format_target(target) == ["CosineSimilarity>=0.9999", "y:CosineSimilarity>=0.9"]
    from toolkit.tuning.tune import check_outputs as met
    golden = {"y": np.array([1.0, 0.0]), "z": np.array([1.0, 0.0])}
    npu = {"y": np.array([1.0, 0.1]), "z": np.array([1.0, 0.1])}  # cosine 1/sqrt(1.01) = 0.995037...
    ok, rows, _ = met(npu, golden, target)
    assert 0.99 < 1 / math.sqrt(1.01) < 0.9999
    assert not ok and {r["Output"]: r["Met"] for r in rows} == {"y": True, "z": False}


# ------------------------------------------------------------------------------ regress
def _table(values: dict) -> pd.DataFrame:
    return pd.DataFrame([{"TensorName": t, "NodeName": t, "OpType": "Relu", "Abnormal": False, "OverFlow": False,
                          "CosineSimilarity": c, "RelativeEuclideanDistance": 0.0} for t, c in values.items()])


def test_regress_changes_bounds_and_per_tensor_tolerances():
    base, new = _table({"a": 0.9995, "b": 0.9995}), _table({"a": 0.998, "b": 0.998})  # worse by 0.0015 > 1e-3
    deltas = lambda tol: sorted(d["TensorName"] for d in layer_changes(base, new, tol)["layer_deltas"])  # noqa: E731
    assert deltas(parse_tolerance(None)) == ["a", "b"]
    assert deltas(parse_tolerance("CosineSimilarity=2e-3")) == []
    assert deltas(parse_tolerance("a:CosineSimilarity=2e-3")) == ["b"]
    assert deltas(parse_tolerance("CosineSimilarity>=0.995")) == []         # the bound holds: no regression
    assert deltas(parse_tolerance("CosineSimilarity>=0.999")) == ["a", "b"]  # both cross it
    assert deltas(parse_tolerance("b:CosineSimilarity>0.998")) == ["a", "b"]  # strict: 0.998 breaks it; a: default
    tol = parse_tolerance("CosineSimilarity>=0.999")
    assert "CosineSimilarity" not in tol and tol.to_json()["bounds"] == ["CosineSimilarity>=0.999"]
    assert parse_tolerance("RelativeEuclideanDistance=off") == {"CosineSimilarity": DEFAULT_TOLERANCE["CosineSimilarity"]}


# ------------------------------------------------------------------------------ policy strings
def _evidence(cosine: float) -> Evidence:
    return Evidence(outputs=["y", "z"], output_rows={"y": [{"CosineSimilarity": cosine}],
                                                     "z": [{"CosineSimilarity": cosine}]},
                    layers=pd.DataFrame(), tasks=[], plan=None, run_ms=[], inputs=["in0"])


def test_policy_condition_strings_bound_outputs_like_tables():
    pol = policy_from_dict({"outputs": {"*": "CosineSimilarity>0.999, y:MaxAbsErr<=1e-2, z:Cosine=off"}})
    limits = output_limits(pol.section("outputs"), ["y", "z"])
    assert limits == {"y": {"CosineSimilarity": math.nextafter(0.999, 1.0), "MaxAbsoluteError": 0.01}}
    strict = {r.name: r.passed for r in check_outputs({"*": pol.section("outputs")["*"]}, _evidence(0.999))}
    inclusive = policy_from_dict({"outputs": {"*": "CosineSimilarity>=0.999"}}).section("outputs")
    loose = {r.name: r.passed for r in check_outputs(inclusive, _evidence(0.999))}
    assert strict == {"outputs.y.CosineSimilarity": False, "outputs.z.CosineSimilarity": False}
    assert loose == {"outputs.y.CosineSimilarity": True, "outputs.z.CosineSimilarity": True}
    assert policy_from_dict({"outputs": {"*": {"Cosine": 0.9}}}).section("outputs") == {"*": {"CosineSimilarity": 0.9}}


def test_policy_layers_thresholds_are_checked_at_load():
    assert policy_from_dict({"layers": {"max_abnormal": 0, "thresholds": "CosineSimilarity<0.9"}}).thresholds() \
        == "CosineSimilarity<0.9"
    with pytest.raises(ConfigError, match=r"\[layers\] thresholds = 'Cosine<x'"):
        policy_from_dict({"layers": {"max_abnormal": 0, "thresholds": "Cosine<x"}})


# ------------------------------------------------------------------------------ the same strings everywhere
ACCEPTED = ["CosineSimilarity<0.999", "CosineSimilarity>=0.999", "CosineSimilarity>0.999", "CosineSimilarity<=0.999",
            "CosineSimilarity=0.999", "MaxAbsoluteError>1e-2", "MaxAbsoluteError<=1e-2", "RMSE=off",
            "y:RED<0.05", "KLD>=0.005,EMR>=1", "MeanRelativeError<1"]


def _consumers():
    return {"--thresholds": parse_thresholds, "--target": parse_target, "--tolerance": parse_tolerance,
            "policy": lambda s: policy_from_dict({"outputs": {"*": s}})}


@pytest.mark.parametrize("text", ACCEPTED)
def test_every_consumer_accepts_the_same_strings(text):
    for name, parse in _consumers().items():
        if name == "--target" and text == "RMSE=off":
            with pytest.raises(UsageError, match="has no condition"):  # removes the only condition: nothing left
                parse(text)
            continue
        if name == "policy" and text == "RMSE=off":
            with pytest.raises(ConfigError, match=r"\[outputs\] holds no criterion"):  # likewise: nothing left
                parse(text)
            continue
        parse(text)


# every kind of mistake; each message must hold a corrected item, and every one it holds must parse
BAD = ["CosineSimilarity>=0.999x", "Cosin<0.9", "cosinesimilarity<0.99", "CosineSimilarity", "CosineSimilarity 0.9",
       "CosineSimilarity<off", "CosineSimilarity>=nan", "CosineSimilarity>=2", "y:MaxAbsErr<=-1", "Cosin<high",
       "RelativeEuclidian>0.1", "Cosine>=", ">=0.9"]


_ITEM_LIKE = re.compile(r"^(.*:)?[A-Za-z_]\w*(<=|>=|<|>|=)[^\s,]+$")


def _suggestions(message: str) -> list[str]:
    """The quoted items of a message that look like corrected items (METRIC<op>VALUE)."""
    return [q for q in re.findall(r"'([^']+)'", message) if _ITEM_LIKE.match(q)]


@pytest.mark.parametrize("text", BAD)
def test_every_suggested_correction_parses_in_every_consumer(text):
    for name, parse in _consumers().items():
        with pytest.raises(UsageError) as err:  # ConfigError (the policy) is a UsageError
            parse(text)
        fixes = [q for q in _suggestions(str(err.value)) if q != text]
        assert fixes, (name, str(err.value))
        for fix in fixes:
            got = parse_conditions(fix)  # the grammar itself, then each consumer (a removal next to a condition,
            keys = {(c.output, c.metric) for c in got}  # as a target that removes its only condition has none left)
            companion = next(c for c in ("MaxAbsoluteError<=1", "RelativeEuclideanDistance<=1")
                             if (None, parse_conditions(c)[0].metric) not in keys)  # not a second line on a metric
            for other in _consumers().values():
                other(f"{fix},{companion}")


def test_two_items_on_one_metric_of_one_output_are_refused_in_every_consumer():
    """Which of two lines on the same metric and output holds would depend on their order: refused, naming
    both; the same metric on two different outputs is two lines."""
    for name, parse in _consumers().items():
        for text in ("CosineSimilarity>=0.99999999,CosineSimilarity<0.5", "MaxAbsErr<=1,MaxAbsoluteError<=1e-9",
                     "y:MaxAbsErr<=1,y:MaxAbsErr<=2"):
            with pytest.raises(UsageError, match="both set") as err:
                parse(text)
            first, second = text.split(",")
            assert first in str(err.value) and second in str(err.value), (name, str(err.value))
        parse("MaxAbsErr<=1,y:MaxAbsErr<=2")


@pytest.mark.parametrize("text", ["", "  ", "CosineSimilarity<0.99,", "CosineSimilarity<0.99,,MaxAbsErr<=1", ","])
def test_an_empty_value_or_item_is_refused(text):
    for name, parse in _consumers().items():
        with pytest.raises(UsageError, match="empty"):
            parse(text)


def test_a_shorthand_replaces_the_defaults_line_but_conflicts_with_the_users():
    default = "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-2"
    assert with_shorthands(default, ["1e-3"], default=True) == "CosineSimilarity>=0.9999,MaxAbsoluteError<=1e-3"
    assert with_shorthands(default, ["y:1e-3"], default=True) == default + ",y:MaxAbsoluteError<=1e-3"
    with pytest.raises(UsageError, match="both set"):
        parse_conditions(with_shorthands("MaxAbsErr<=1", ["1e-9"]))
    with pytest.raises(UsageError, match="both set"):
        parse_conditions(with_shorthands(None, ["1e-9", "1"]))


def test_the_reported_example_is_accepted_now():
    """--thresholds "CosineSimilarity>=0.999" used to be refused, suggesting CosineSimilarity<=0.999, itself
    refused; both are accepted now and say different things (at least 0.999 / strictly above 0.999)."""
    assert parse_thresholds("CosineSimilarity>=0.999")["CosineSimilarity"] == 0.999
    assert parse_thresholds("CosineSimilarity<=0.999")["CosineSimilarity"] == math.nextafter(0.999, 1.0)


# ------------------------------------------------------------------------------ --atol / --rtol
def test_atol_rtol_are_items_of_the_grammar():
    assert with_shorthands(None) is None and with_shorthands("RMSE=off") == "RMSE=off"
    text = with_shorthands("CosineSimilarity<0.9", ["1e-3", "y:2e-3,z:0"], ["0.01"])
    assert text == ("CosineSimilarity<0.9,MaxAbsoluteError<=1e-3,y:MaxAbsoluteError<=2e-3,z:MaxAbsoluteError<=0,"
                    "MaxRelativeError<=0.01")
    lines = parse_thresholds(text)
    assert lines["MaxAbsoluteError"] == 1e-3 and lines.for_tensor("y")["MaxAbsoluteError"] == 2e-3
    assert abnormal(with_shorthands(None, ["0.4"])) and not abnormal(with_shorthands(None, ["0.5"]))
    # --rtol bounds max |x/y - 1| = 2^-8 here
    assert abnormal(with_shorthands(None, (), ["0.0039"])) and not abnormal(with_shorthands(None, (), ["0.00390625"]))


@pytest.mark.parametrize("value", ["abc", "-1", ":1e-3", "nan", "1e-3:"])
def test_bad_atol_names_the_option_and_a_valid_value(value):
    with pytest.raises(UsageError) as err:
        with_shorthands(None, [value])
    msg = str(err.value)
    assert msg.startswith(f"--atol '{value}'") and "--atol 1e-3" in msg
    with_shorthands(None, ["1e-3", "logits:1e-3"])  # the two examples it gives


@pytest.mark.parametrize("option", ["--atol", "--rtol"])
@pytest.mark.parametrize("value", ["", "  ", ",", " , "])
def test_an_atol_or_rtol_that_names_no_bound_is_refused_not_ignored(option, value):
    """An empty --atol '' had been dropped silently (the run then judged with no bound), where an empty
    --thresholds is refused: refused the same way, naming the option."""
    with pytest.raises(UsageError) as err:
        with_shorthands(None, [value] if option == "--atol" else (), [value] if option == "--rtol" else ())
    assert str(err.value).startswith(f"{option} {value!r} names no bound") and "\n" not in str(err.value)


def test_the_users_lines_replace_a_policys_line_by_line():
    from toolkit.compare.metrics import overridden

    policy = "CosineSimilarity<0.999,MaxAbsoluteError>1,y:MaxAbsoluteError>2"
    got = overridden(policy, "MaxAbsErr>0.5")
    assert got == "CosineSimilarity<0.999,y:MaxAbsoluteError>2,MaxAbsErr>0.5"
    lines = parse_thresholds(got)
    assert lines["MaxAbsoluteError"] == 0.5 and lines["CosineSimilarity"] == 0.999
    assert lines.for_tensor("y")["MaxAbsoluteError"] == 2
    assert overridden(policy, None) == policy and overridden(None, None) is None
    assert overridden(None, "CosineSimilarity<0.9") == "CosineSimilarity<0.9"


@pytest.mark.parametrize("acronym", ["MRE", "MAE", "mre", "CS", "RMSE", "ARE"])
def test_an_acronym_of_several_metrics_suggests_all_of_them(acronym):
    """An unknown acronym is answered with every metric whose capitals spell it (MRE: MaxRelativeError and
    MeanRelativeError), never with one look-alike; a short form that is an alias is accepted as before."""
    from toolkit.compare.metrics import parse_thresholds
    from toolkit.compare.metrics.grammar import SHORT_FORMS, THRESHOLDABLE

    spelled = [n for n in THRESHOLDABLE if "".join(c for c in n if c.isupper()).lower() == acronym.lower()]
    if acronym in SHORT_FORMS:  # an alias: accepted, its line turned off
        assert SHORT_FORMS[acronym] not in parse_thresholds(f"{acronym}=off")
        return
    with pytest.raises(UsageError) as info:
        parse_thresholds(f"{acronym}=off")
    msg = str(info.value)
    assert spelled and all(f"'{n}=off'" in msg for n in spelled), msg
