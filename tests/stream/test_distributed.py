"""The streamed diagnosis split across Ray workers (toolkit.stream.distributed): on a two-node local cluster
started here, ``--ray`` on one input runs the plan's kernels in contiguous parts, one Ray task each, and writes
the result.csv, verdict and findings of the single-machine run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pandas as pd
import pytest

from tests.graphs import residual_model
from toolkit.commands.diagnose import diagnose_command
from toolkit.config.schema import Config
from toolkit.core.errors import UsageError

RAY = shutil.which("ray") or (os.path.join(os.path.dirname(sys.executable), "ray")
                              if os.path.exists(os.path.join(os.path.dirname(sys.executable), "ray")) else None)
SEQ, WIDTH = 32, 64


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _stop(procs: list) -> None:
    """SIGTERM each `ray start --block` we started and its process group (its GCS, raylet and workers), by id;
    SIGKILL what is left after 10 s."""
    for proc in reversed(procs):
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 10
    for proc in reversed(procs):
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _refresh_ray_config(ray) -> None:
    """Make this process read RAY_AUTH_MODE again (Ray caches its config; ray._private.authentication
    refreshes it the same way when it turns token mode on for a local cluster)."""
    from ray._raylet import Config

    Config.initialize("")


@pytest.fixture(scope="module")
def cluster():
    """A head node and a second node on 127.0.0.1, one CPU each, in a private temp dir; this process connected
    to it. Only the processes started here are stopped (by process group): `ray stop --force` would end every
    Ray on the machine."""
    if RAY is None:
        pytest.skip("the 'ray' command is not installed (pip install 'npuscope[ray]')")
    ray = pytest.importorskip("ray", reason="the ray package is not installed (pip install 'npuscope[ray]')")
    tmp = tempfile.mkdtemp(prefix="npr")  # short: Ray's socket paths must fit in 107 bytes
    port = _free_port()
    procs: list = []
    log = open(os.path.join(tmp, "start.log"), "wb")
    # authentication off and a home of its own, for the nodes and this process alike: a ~/.ray/auth_token left
    # on the machine, or RAY_AUTH_MODE=token set in this process by an earlier local ray.init(), made the nodes
    # and this process disagree on authentication (the connection or `ray start` failed)
    saved = {k: os.environ.get(k) for k in ("HOME", "RAY_AUTH_MODE")}
    os.environ.update(HOME=tmp, RAY_AUTH_MODE="disabled")
    _refresh_ray_config(ray)  # this process reads the mode from its cached config, as Ray itself refreshes it

    def start(*args):
        procs.append(subprocess.Popen([RAY, "start", *args, "--num-cpus=1", "--block"], stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))

    try:
        start("--head", "--node-ip-address=127.0.0.1", f"--port={port}", "--include-dashboard=false",
              f"--temp-dir={tmp}")
        deadline = time.monotonic() + 90
        while not _listening(port):
            assert procs[0].poll() is None and time.monotonic() < deadline, open(log.name).read()[-2000:]
            time.sleep(0.5)
        start(f"--address=127.0.0.1:{port}")
        ray.init(address=f"127.0.0.1:{port}", log_to_driver=False, _node_ip_address="127.0.0.1")
        while sum(1 for n in ray.nodes() if n["Alive"]) < 2:
            assert procs[1].poll() is None and time.monotonic() < deadline, open(log.name).read()[-2000:]
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        ray.shutdown()
        _stop(procs)
        log.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        _refresh_ray_config(ray)
        shutil.rmtree(tmp, ignore_errors=True)


def _model(tmp_path):
    path, inits = residual_model(tmp_path, np.random.default_rng(0), seq=SEQ, width=WIDTH, blowup_layer=3)
    x = np.random.default_rng(1).standard_normal((1, SEQ, WIDTH)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    return path, inits


CFG = Config(precision_mode="force_fp16", op_compiler_cache_mode="disable")


RUNS = r"""
import json, sys
from toolkit.commands.diagnose import diagnose_command
from toolkit.config.schema import Config

path, folder, address = sys.argv[1:4]
cfg = Config(precision_mode="force_fp16", op_compiler_cache_mode="disable")
kw = dict(inputs=f"{folder}/in.npz", html=False, stream=True, segment_mb=0.04)
runs = {"local": diagnose_command(path, cfg, out=f"{folder}/local", **kw),
        "ray": diagnose_command(path, cfg, out=f"{folder}/ray", ray=address, ray_parts=2, **kw),
        "one": diagnose_command(path, cfg, out=f"{folder}/one", ray=address, ray_parts=1, verify=False, **kw)}
print(json.dumps({k: {"verdict": r["verdict"], "summary": r["diagnosis"].summary,
                      "findings": [f.to_dict() for f in r["diagnosis"].findings]} for k, r in runs.items()},
                 default=str))
"""


class _Run(dict):
    """A diagnose_command result as the child process reported it: ["verdict"], ["diagnosis"].summary / .findings."""

    def __init__(self, got: dict):
        super().__init__(verdict=got["verdict"],
                         diagnosis=type("D", (), {"summary": got["summary"], "findings": got["findings"]}))


def _runs_in_a_fresh_process(path, tmp_path, address) -> dict:
    """The local, two-part and one-part runs, in a child process: a Ray driver of its own (a process that ran a
    local Ray cluster before, as another test of the same worker may, registered objects at an address the nodes
    could not reach)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", RUNS, str(path), str(tmp_path), address], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a Ray cluster's start and stop (~35 s) and three diagnoses: about 65 s on 2 cores
def test_ray_parts_write_the_single_machine_result(cluster, tmp_path):
    """A six-layer residual stack with a planted FP16 overflow, its weights as external data: compare split in
    two Ray parts writes result.csv byte for byte as the local streamed run, with the same verdict, reasons and
    findings; the two parts ran distinct, contiguous, non-empty kernel ranges (and reference segments) on the
    cluster's two nodes, each with a Ray memory budget under what the whole model asks for."""
    path, _ = _model(tmp_path)
    got = _runs_in_a_fresh_process(path, tmp_path, cluster)
    local, remote, one = (_Run(got[k]) for k in ("local", "ray", "one"))

    csv = (tmp_path / "local" / "result.csv").read_bytes()
    assert csv == (tmp_path / "ray" / "result.csv").read_bytes()
    dl, dr = local["diagnosis"], remote["diagnosis"]
    assert local["verdict"] == remote["verdict"] == "FAIL"  # the planted overflow reaches the output
    for key in ("reasons", "stage", "first_divergence", "origin_nodes", "counts"):
        assert dl.summary[key] == dr.summary[key], key
    assert dl.findings == dr.findings and dl.findings
    assert json.loads((tmp_path / "local" / "findings.json").read_text()) == \
        json.loads((tmp_path / "ray" / "findings.json").read_text())

    streamed = dr.summary["streamed"]
    parts = streamed["parts"]
    assert "parts" not in dl.summary["streamed"] and streamed["ray"] == cluster
    assert len(parts) == 2
    kernels = dr.summary["counts"]["kernels"]
    ranges = [tuple(p["kernels"]) for p in parts]
    assert ranges[0][0] == 0 and ranges[-1][1] == kernels
    assert all(a < b for a, b in ranges) and ranges[0][1] == ranges[1][0]  # contiguous, none empty
    segs = [tuple(p["segments"]) for p in parts]  # reference segments run, first and last (inclusive)
    assert segs[0][0] == 0 and segs[-1][1] == streamed["segments"] - 1 and segs[0][1] + 1 == segs[1][0]
    assert all(a <= b for a, b in segs)
    assert len({p["node_id"] for p in parts}) == 2  # SPREAD over the two one-CPU nodes
    table = pd.read_csv(tmp_path / "ray" / "result.csv")
    assert sum(p["rows"] for p in parts) == len(table)
    # the whole model's weights (external data files beside the model) and tensors need more than a part asks
    weights = sum(f.stat().st_size for f in tmp_path.iterdir() if f.suffix not in (".onnx", ".npz") and f.is_file())
    assert weights > 0
    for p in parts:
        assert p["assigned"].get("memory") == p["memory_bytes"]  # Ray gave the task the budget it asked for
    whole = one["diagnosis"].summary["streamed"]["parts"]
    assert len(whole) == 1 and tuple(whole[0]["kernels"]) == (0, kernels)
    assert all(p["memory_bytes"] < whole[0]["memory_bytes"] for p in parts)
    assert whole[0]["memory_bytes"] - max(p["memory_bytes"] for p in parts) > weights // 4
    assert (tmp_path / "one" / "result.csv").read_bytes() == csv


def test_ray_address_nobody_listens_on_is_a_usage_error(tmp_path):
    """--ray host:port with nothing there: exit 2 and one line naming the address and the fix, at once."""
    path, _ = _model(tmp_path)
    port = _free_port()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(path), "--inputs", str(tmp_path / "in.npz"),
                           "--ray", f"127.0.0.1:{port}", "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "--ray" in line]
    assert errors and ("cannot connect" in errors[0] or "pip install" in errors[0]), proc.stderr
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "out" / "result.csv").exists()


def test_ray_options_that_cannot_apply_are_usage_errors(tmp_path):
    """--ray-parts without --ray (through the command line), --ray with --no-stream, --ray-parts on a folder."""
    path, _ = _model(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "toolkit", "compare", str(path), "--inputs", str(tmp_path / "in.npz"),
                           "--ray-parts", "2", "--out", str(tmp_path / "a")], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert proc.returncode == 2 and "--ray-parts 2 splits a pass across a Ray cluster; give --ray ADDRESS too" in \
        proc.stderr, proc.stderr
    kw = dict(inputs=str(tmp_path / "in.npz"), html=False)
    with pytest.raises(UsageError, match="drop --no-stream"):
        diagnose_command(str(path), CFG, out=str(tmp_path / "b"), ray="127.0.0.1:1", stream=False, **kw)
    folder = tmp_path / "inputs"
    folder.mkdir()
    for i in range(2):
        np.savez(folder / f"in{i}.npz", x=np.zeros((1, SEQ, WIDTH), np.float32) + i)
    with pytest.raises(UsageError, match="a dataset run gives whole inputs to the Ray workers: drop --ray-parts"):
        diagnose_command(str(path), CFG, inputs=str(folder), out=str(tmp_path / "c"), html=False, ray_parts=2)
