"""Profile findings (toolkit/profile/findings.py): launch overhead, pre/post bottlenecks, user placement told
from fallback, and cast islands."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from toolkit.profile.device import load_device
from toolkit.profile.findings import ProfileData, cast_islands, run_rules


def _cast_data(island: bool) -> ProfileData:
    """Kernels: Cast of graph input x -> a (fp16) [-> Cast -> b (fp32) -> Cast] -> c (fp16), 10 µs each."""
    chain = [("cast_x", "cast", "fp16", ["x"], ["x16"]), ("a", "none", "fp16", ["x16"], ["t1"])]
    if island:
        chain += [("cast1", "cast", "fp32", ["t1"], ["t1_32"]), ("b", "none", "fp32", ["t1_32"], ["t2"]),
                  ("cast2", "cast", "fp16", ["t2"], ["t2_16"]), ("c", "none", "fp16", ["t2_16"], ["y"])]
    else:
        chain += [("c", "none", "fp16", ["t1"], ["y"])]
    costs = pd.DataFrame([{"Kernel": k, "Stream": "npu", "Fusion": f, "Precision": p, "DurationUs": 10.0,
                           "OpType": "Cast" if f == "cast" else "Relu"} for k, f, p, _i, _o in chain])
    producers = {t: k for k, _f, _p, _i, outs in chain for t in outs}
    readers: dict[str, list[str]] = {}
    for k, _f, _p, ins, _o in chain:
        for t in ins:
            readers.setdefault(t, []).append(k)
    return ProfileData(costs, pd.DataFrame(), load_device(), producers=producers, readers=readers,
                       kernel_io={k: (i, o) for k, _f, _p, i, o in chain})


def test_cast_islands_without_islands_talks_about_the_input_cast():
    [f] = cast_islands(_cast_data(island=False))
    assert f.evidence["fp32_islands"] == [] and f.evidence["input_casts"] == ["x"]
    assert "black list" not in f.recommendation and "island" not in f.recommendation.lower()
    assert "FP16 inputs" in f.recommendation and "x" in f.recommendation


def test_cast_islands_with_an_island_names_it_and_the_input_cast():
    [f] = cast_islands(_cast_data(island=True))
    assert f.evidence["fp32_islands"] == ["b"] and f.evidence["input_casts"] == ["x"]
    assert f.evidence["casts"] == 3 and f.evidence["other_casts"] == 2
    assert "black list" in f.recommendation and "FP16 inputs" in f.recommendation


# ---------------------------------------------------------------- findings
def _costs(rows):
    base = {"Stream": "npu", "Fusion": "none", "Precision": "fp16", "Nodes": "n", "OpType": "Add",
            "ComputeUs": 0.0, "MemoryUs": 0.1, "LaunchUs": 4.0, "Bound": "launch"}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_findings_launch_overhead_and_prepost_bottleneck():
    costs = _costs([{"Kernel": f"k{i}", "DurationUs": 4.1} for i in range(10)]
                   + [{"Kernel": "big", "DurationUs": 100.0, "Bound": "compute", "LaunchUs": 4.0}])
    events = pd.DataFrame({"Task": [0], "Stream": ["npu"], "StartUs": [0.0], "EndUs": [141.0], "DurationUs": [141.0],
                           "Kernel": ["big"], "Deps": [""], "Name": ["big"]})
    kinds = {f.kind: f for f in run_rules(ProfileData(costs, events, load_device(), pre_ms=[0.1], post_ms=[0.1]))}
    # launches: 10 x 4 µs of 141 µs device time = 28% >= 10%; pre + post 0.2 ms > 0.141 ms
    assert kinds["launch_overhead"].evidence["share"] == pytest.approx(40.0 / 141.0, abs=1e-4)
    assert kinds["prepost_bottleneck"].evidence["device_ms_simulated"] == pytest.approx(0.141)
    quiet = run_rules(ProfileData(costs.iloc[-1:], events, load_device(), pre_ms=[0.01], post_ms=[0.01]))
    assert not [f for f in quiet if f.kind in ("launch_overhead", "prepost_bottleneck")]


def _host_costs(op_type="Softmax", nodes="attn_softmax", kernel="attn_softmax"):
    return _costs([{"Kernel": "big", "DurationUs": 100.0, "Bound": "compute"},
                   {"Kernel": kernel, "Stream": "host", "OpType": op_type, "Nodes": nodes, "DurationUs": 30.0,
                    "Bound": "host", "Precision": "fp32"}])


def _events():
    return pd.DataFrame({"Task": [0, 1], "Stream": ["npu", "host"], "StartUs": [0.0, 100.0], "EndUs": [100.0, 130.0],
                         "DurationUs": [100.0, 30.0], "Kernel": ["big", "attn_softmax"], "Deps": ["", "0"],
                         "Name": ["big", "attn_softmax"]})


@pytest.mark.parametrize("case, kind, words", [
    ("user_op_type", "cpu_placement", ["placed on the CPU by op_placement['Softmax']"]),
    ("user_node", "cpu_placement", ["placed on the CPU by op_placement['attn_softmax']"]),
    ("unsupported_by_compiler", "cpu_fallback", ["runs on the host CPU", "not supported: data-dependent"]),
    ("device_unsupported", "cpu_fallback", ["lists Softmax in unsupported_ops"]),
    ("unexplained", "cpu_fallback", ["placed on the CPU by the compiler"]),
])
def test_cpu_kernels_tell_user_placement_from_fallback(case, kind, words):
    """The defect: a Softmax the user put on the CPU was reported as a missing device feature."""
    dev = load_device()
    user = {"user_op_type": {"Softmax"}, "user_node": {"attn_softmax"}, "unsupported_by_compiler": {"Softmax"},
            "device_unsupported": {"Softmax"}, "unexplained": set()}[case]
    reasons = {"attn_softmax": "not supported: data-dependent output shape"} if case == "unsupported_by_compiler" else {}
    if case == "device_unsupported":
        dev = dataclasses.replace(dev, unsupported_ops=("Softmax",))
    found = [f for f in run_rules(ProfileData(_host_costs(), _events(), dev, user_placed=user, reasons=reasons))
             if f.kind in ("cpu_fallback", "cpu_placement")]
    assert [(f.kind, f.subject) for f in found] == [(kind, "attn_softmax")]
    assert all(w in found[0].recommendation for w in words), found[0].recommendation
    assert ("does not run it" in found[0].recommendation) is False
    assert found[0].severity == ("info" if kind == "cpu_placement" else "warning")


@pytest.mark.parametrize("cfg, says, never", [
    ({"fusion_level": 0}, ["raise fusion_level from 0 to 2"], []),
    ({"fusion_level": 1}, ["raise fusion_level from 1 to 2"], []),
    ({"fusion_level": 2}, ["fusion is fully on (fusion_level 2", "batch requests"], ["raise fusion_level", "enable fusion"]),
    ({"fusion_level": 2, "fusion_switch_file": {"Switch": {"UBFusion": {"ConvBiasReluFusion": "off"}}}},
     ["switch back on", "UBFusion.ConvBiasReluFusion"], ["raise fusion_level", "enable fusion"]),
])
def test_launch_overhead_advice_follows_the_config(cfg, says, never):
    """The defect: "enable fusion (fusion_level 2)" was advised when the level already was 2."""
    from toolkit.config.schema import Config

    costs = _costs([{"Kernel": f"k{i}", "DurationUs": 4.1} for i in range(10)]
                   + [{"Kernel": "big", "DurationUs": 100.0, "Bound": "compute", "LaunchUs": 4.0}])
    events = pd.DataFrame({"Task": [0], "Stream": ["npu"], "StartUs": [0.0], "EndUs": [141.0], "DurationUs": [141.0],
                           "Kernel": ["big"], "Deps": [""], "Name": ["big"]})
    (f,) = [f for f in run_rules(ProfileData(costs, events, load_device(), config=Config(**cfg)))
            if f.kind == "launch_overhead"]
    assert all(w in f.recommendation for w in says) and not any(w in f.recommendation for w in never), f.recommendation
    assert f.evidence["fusion_level"] == cfg["fusion_level"]


def test_a_plan_with_no_kernel_says_nothing_was_timed():
    """No kernel (every output folded at compile time): a 0 ms device time and an unbounded throughput are
    flagged as saying nothing of the device; any kernel at all silences it."""
    empty_costs = _costs([{"Kernel": "k", "DurationUs": 3.0}]).iloc[0:0]  # the columns, no row
    no_events = pd.DataFrame(columns=["Task", "Stream", "StartUs", "EndUs", "DurationUs", "Kernel", "Deps", "Name"])
    found = [f for f in run_rules(ProfileData(empty_costs, no_events, load_device())) if f.kind == "nothing_timed"]
    assert len(found) == 1 and found[0].severity == "warning" and "compile time" in found[0].recommendation
    costs = _costs([{"Kernel": "k", "DurationUs": 3.0}])
    assert not [f for f in run_rules(ProfileData(costs, no_events, load_device())) if f.kind == "nothing_timed"]
