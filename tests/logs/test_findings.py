"""Log findings (toolkit/logs/findings.py): CPU fallback, casts, transfers, launch overhead and pre/post
bottlenecks, never mixing time kinds of one source."""

from __future__ import annotations

import pandas as pd

from tests.logs.helpers import _summary
from toolkit.logs.findings import breakdown_findings, idle_share, op_summary_findings


def test_findings_cpu_fallback_casts_transfers():
    s = _summary([{"Op Name": "conv", "OP Type": "Conv2D", "Task Type": "AI_CORE", "Task Duration(us)": 60},
                  {"Op Name": "topk", "OP Type": "TopK", "Task Type": "AI_CPU", "Task Duration(us)": 10},
                  {"Op Name": "c1", "OP Type": "Cast", "Task Type": "AI_VECTOR_CORE", "Task Duration(us)": 10},
                  {"Op Name": "h2d", "OP Type": "MemcpyAsync", "Task Type": "MEMCPY", "Task Duration(us)": 20}])
    found = {f.kind: f for f in op_summary_findings(s)}
    assert set(found) == {"cpu_fallback", "cast_overhead", "transfer_overhead", "hotspot"}
    assert found["cpu_fallback"].evidence["share_pct"] == 10.0
    assert found["cast_overhead"].evidence["share_pct"] == 10.0 and found["transfer_overhead"].evidence["tasks"] == 1
    assert found["hotspot"].evidence["op_type"] == "Conv2D"
    only_cpu = _summary([{"Op Name": "a", "OP Type": "Conv", "Task Type": "HOST_CPU", "Task Duration(us)": 5}])
    assert op_summary_findings(only_cpu)[0].kind == "hotspot"          # all-CPU run: no fallback


def test_findings_never_mix_time_kinds_of_one_source():
    # a profile's trace: simulated device kernels next to the same kernels measured on the host (HOST_CPU)
    sim = [{"Op Name": f"k{i}", "OP Type": "Conv", "Task Type": "AI_CORE", "Task Duration(us)": 10,
            "Time Kind": "simulated", "Source": "trace.json"} for i in range(3)]
    host = [{**r, "Task Type": "HOST_CPU", "Task Duration(us)": 500, "Time Kind": "measured"} for r in sim]
    found = op_summary_findings(_summary(sim + host))
    assert "cpu_fallback" not in {f.kind for f in found}
    assert {f.subject for f in found} == {"trace.json [simulated]", "trace.json [measured]"}
    one_kind = op_summary_findings(_summary(sim))
    assert {f.subject for f in one_kind} == {"trace.json"}


def test_launch_overhead_needs_small_kernels_and_gaps():
    gaps = _summary([{"Op Name": f"k{i}", "OP Type": f"T{i % 5}", "Task Type": "AI_CORE", "Stream ID": 0,
                      "Task Start Time(us)": 25.0 * i, "Task Duration(us)": 5.0} for i in range(40)])
    idle, span = idle_share(gaps)
    assert span == 25.0 * 39 + 5 and idle == 20.0 * 39
    assert "launch_overhead" in {f.kind for f in op_summary_findings(gaps)}
    dense = _summary([{"Op Name": f"k{i}", "OP Type": f"T{i % 5}", "Task Type": "AI_CORE", "Stream ID": 0,
                       "Task Start Time(us)": 5.0 * i, "Task Duration(us)": 5.0} for i in range(40)])
    assert "launch_overhead" not in {f.kind for f in op_summary_findings(dense)}


def test_breakdown_finding_pre_post_bottleneck():
    b = pd.DataFrame({"Stage": ["pre", "host-to-device", "device", "device-to-host", "post"],
                      "Ms": [3.0, 0.5, 2.0, 0.5, 1.0], "TimeKind": ["measured", "simulated", "simulated", "simulated",
                                                                    "measured"]})
    (f,) = breakdown_findings(b)
    assert f.kind == "pre_post_bottleneck" and f.evidence == {"pre_post_ms": 4.0, "device_ms": 2.0}
    assert breakdown_findings(b.assign(Ms=[1.0, 0.5, 2.0, 0.5, 0.5])) == []
