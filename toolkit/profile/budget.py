"""Simulated device latency and throughput of one compiled plan, for budgets (``npuscope signoff``'s [latency]).

Latency is the makespan of one request's schedule (toolkit.profile.schedule: the roofline cost of every
kernel on the device profile, host-device copies on the copy stream, CPU-placed kernels on the host stream,
dependencies respected). Throughput is requests per second of ``requests`` back-to-back requests under the
pipelined schedule of toolkit.profile.e2e with no pre- or post-processing (the device-bound rate). Both are
*simulated* device times (Time Kind ``simulated``), not wall time measured on this host.
"""

from __future__ import annotations

from toolkit.profile.cost import kernel_costs
from toolkit.profile.device import load_device
from toolkit.profile.e2e import run_e2e, throughput
from toolkit.profile.schedule import device_graph, makespan_us, simulate

#: requests simulated when none is given: a policy's [latency] throughput figure and `npuscope profile --requests`
DEFAULT_REQUESTS = 32


def device_timing(compiled, device: str | None = None, requests: int = DEFAULT_REQUESTS) -> dict:
    """{"latency_ms", "throughput_rps", "device", "requests", "time_kind": "simulated", "notes"} of ``compiled``
    (a toolkit.compiler.pipeline.CompileResult) on ``device`` (a built-in name or a .json path; default the
    built-in inference card).

    Raises:
        ConfigError: an unknown device or an invalid device file (toolkit.profile.device.load_device).
        ValueError: ``requests`` < 1.
    """
    if requests < 1:
        raise ValueError(f"requests must be >= 1, got {requests}")
    dev = load_device(device)
    costs = kernel_costs(compiled.plan, compiled.model, dev)
    graph = device_graph(compiled.plan, costs, dev)
    latency_ms = makespan_us(simulate(graph.tasks)) / 1e3
    many = run_e2e(graph.tasks, [0.0] * requests, [0.0] * requests, "pipelined")
    return {"latency_ms": latency_ms, "throughput_rps": throughput(many), "device": dev.name,
            "requests": requests, "time_kind": "simulated", "notes": list(graph.notes)}
