"""toolkit.core.ray_cluster: a --ray address where nothing listens is refused at once, on every command that takes
one (Ray itself retried for minutes)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from toolkit.core.errors import UsageError
from toolkit.core.ray_cluster import probe


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_a_listening_port_passes_and_a_closed_one_is_refused():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        probe(f"127.0.0.1:{srv.getsockname()[1]}")
    port = _closed_port()
    with pytest.raises(UsageError, match=rf"--ray '127.0.0.1:{port}': cannot connect"):
        probe(f"127.0.0.1:{port}")


@pytest.mark.parametrize("address", ["auto", "local", "ray://head:10001", "headnode"])
def test_addresses_ray_resolves_itself_are_left_to_it(address, monkeypatch):
    """No TCP probe for them (Ray resolves these itself): nothing is connected to, nothing raised."""
    import toolkit.core.ray_cluster as rc

    tried = []
    monkeypatch.setattr(rc.socket, "create_connection", lambda *a, **k: tried.append(a) or (_ for _ in ()).throw(
        OSError("refused")))
    assert probe(address) is None
    assert tried == []
    with pytest.raises(UsageError):  # the same patch does refuse a host:port, so the check above is not vacuous
        probe("127.0.0.1:1")
    assert len(tried) == 1


@pytest.mark.parametrize("address", ["host:port", "127.0.0.1:", "1.2.3.4:-1"])
def test_a_port_that_is_no_number_is_a_usage_error(address):
    with pytest.raises(UsageError, match="port is not a number"):
        probe(address)


@pytest.mark.parametrize("command", ["compare", "diagnose"])
def test_dataset_runs_refuse_an_unreachable_cluster_at_once(tmp_path, command):
    pytest.importorskip("ray")
    folder = tmp_path / "ds"
    folder.mkdir()
    for i in range(2):
        np.savez(folder / f"{i}.npz", x=np.random.default_rng(i).random((1, 3, 32, 32), dtype=np.float32))
    port = _closed_port()
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "toolkit", command, "resnet_small", "--inputs", str(folder), "--ray",
                        f"127.0.0.1:{port}", "--out", str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "cannot connect" in lines[0], p.stderr
    assert time.monotonic() - t0 < 300  # Ray's own retries took over 10 minutes
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
