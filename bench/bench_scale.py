"""Diagnose on transformer-size models against a plain onnxruntime FP32 run, measured side by side (issue 21).

Exports random-weight models with torch (opset 17, the legacy TorchScript exporter), each into its own folder
under --work (default /tmp/scale):
  - bert128, bert512: BERT-base (12 layers, hidden 768, 12 heads, FFN 3072, vocab 30522; 110M parameters),
    input_ids (1, seq) int64;
  - llama2, llama6, llama16: Llama-style decoders (hidden 2048, 16 heads, SwiGLU MLP 5632, RMSNorm, rotary
    embeddings, causal mask, vocab 32000; 0.23 / 0.44 / 0.95 B parameters), input_ids (1, 128) int64. Every
    Llama model is saved with its weights as external data in one file beside the model (model.onnx.data); the
    16-layer one has 3.6 GiB of it, over protobuf's 2 GiB limit.
Each model's input is written beside it (inputs.npz, seeded), and both sides read the same file.

For each model, in fresh child processes (one at a time: never two big models at once):
  - onnxruntime: InferenceSession(model path, CPU, default options) + one run: wall time and peak RSS;
  - npuscope: ``npuscope --quiet compare MODEL --inputs inputs.npz --out ...`` (the diagnosis without HTML;
    ``--html`` runs ``diagnose``): wall time, peak RSS, exit code.
Peak RSS is the child's own ru_maxrss (os.wait4). A child whose RSS passes --max-rss GiB (polled every 0.2 s) is
killed and reported as such (the machine is shared). Printed: ratios and the issue's targets (diagnose peak RSS
<= 2x onnxruntime's; time <= 5x onnxruntime's session creation plus one run), then a projection of a 7B Llama's
peak memory from a straight-line fit of peak RSS against weight bytes over the measured Llama models.

Usage: python bench/bench_scale.py [--models bert128,llama2] [--work /tmp/scale] [--max-rss 12] [--timeout 900]
       [--keep] [--html]   (torch must be importable: pip install -e '.[bench]')
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

MODELS = ("bert128", "bert512", "llama2", "llama6", "llama16")
GIB = 2**30
#: Llama-2-7B: 32 layers, hidden 4096, MLP 11008, vocab 32000 (6.74 B parameters, FP32 weights).
LLAMA7B = {"layers": 32, "hidden": 4096, "mlp": 11008, "vocab": 32000}

EXPORT = r'''
import math, sys, json
import numpy as np
import torch
from torch import nn

name, folder = sys.argv[1], sys.argv[2]
torch.manual_seed(0)


class BertLayer(nn.Module):
    def __init__(s, h=768, heads=12, ffn=3072):
        super().__init__()
        s.heads, s.d = heads, h // heads
        s.qkv, s.o = nn.Linear(h, 3 * h), nn.Linear(h, h)
        s.ln1, s.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        s.up, s.down = nn.Linear(h, ffn), nn.Linear(ffn, h)

    def forward(s, x):
        b, t, h = x.shape
        q, k, v = s.qkv(x).view(b, t, 3, s.heads, s.d).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(s.d), -1) @ v
        x = s.ln1(x + s.o(a.transpose(1, 2).reshape(b, t, h)))
        return s.ln2(x + s.down(nn.functional.gelu(s.up(x))))


class Bert(nn.Module):
    def __init__(s, seq, h=768, layers=12, vocab=30522):
        super().__init__()
        s.tok, s.pos, s.ln = nn.Embedding(vocab, h), nn.Embedding(512, h), nn.LayerNorm(h)
        s.layers = nn.ModuleList(BertLayer() for _ in range(layers))
        s.register_buffer("ids", torch.arange(seq)[None])

    def forward(s, input_ids):
        x = s.ln(s.tok(input_ids) + s.pos(s.ids))
        for layer in s.layers:
            x = layer(x)
        return x


class RMSNorm(nn.Module):
    def __init__(s, h):
        super().__init__()
        s.w = nn.Parameter(torch.ones(h))

    def forward(s, x):
        return s.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def rotate(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class LlamaLayer(nn.Module):
    def __init__(s, h=2048, heads=16, mlp=5632):
        super().__init__()
        s.heads, s.d = heads, h // heads
        s.q, s.k, s.v, s.o = (nn.Linear(h, h, bias=False) for _ in range(4))
        s.gate, s.up, s.down = nn.Linear(h, mlp, bias=False), nn.Linear(h, mlp, bias=False), nn.Linear(mlp, h, bias=False)
        s.n1, s.n2 = RMSNorm(h), RMSNorm(h)

    def forward(s, x, cos, sin, mask):
        b, t, h = x.shape
        y = s.n1(x)
        q, k, v = (p(y).view(b, t, s.heads, s.d).transpose(1, 2) for p in (s.q, s.k, s.v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(s.d) + mask, -1) @ v
        x = x + s.o(a.transpose(1, 2).reshape(b, t, h))
        y = s.n2(x)
        return x + s.down(nn.functional.silu(s.gate(y)) * s.up(y))


class Llama(nn.Module):
    def __init__(s, layers, seq=128, h=2048, vocab=32000, heads=16):
        super().__init__()
        s.tok = nn.Embedding(vocab, h)
        s.layers = nn.ModuleList(LlamaLayer(h, heads) for _ in range(layers))
        s.norm, s.head = RMSNorm(h), nn.Linear(h, vocab, bias=False)
        d = h // heads
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        f = torch.outer(torch.arange(seq).float(), inv)
        e = torch.cat([f, f], -1)
        s.register_buffer("cos", e.cos()[None, None])
        s.register_buffer("sin", e.sin()[None, None])
        s.register_buffer("mask", torch.triu(torch.full((seq, seq), -1e9), 1)[None, None])

    def forward(s, input_ids):
        x = s.tok(input_ids)
        for layer in s.layers:
            x = layer(x, s.cos, s.sin, s.mask)
        return s.head(s.norm(x))


if name.startswith("bert"):
    seq, model, vocab = int(name[4:]), None, 30522
    model = Bert(seq)
else:
    seq, vocab = 128, 32000
    model = Llama(int(name[5:]))
model.eval()
ids = torch.from_numpy(np.random.default_rng(0).integers(0, vocab, (1, seq), dtype=np.int64))
np.savez(f"{folder}/inputs.npz", input_ids=ids.numpy())
params = sum(p.numel() for p in model.parameters())
raw = f"{folder}/raw"
import os
os.makedirs(raw, exist_ok=True)
with torch.no_grad():
    torch.onnx.export(model, (ids,), f"{raw}/model.onnx", opset_version=17, input_names=["input_ids"],
                      output_names=["output"], dynamo=False)
del model
import onnx
m = onnx.load(f"{raw}/model.onnx")  # the exporter may write one file per tensor: re-save as one data file
external = name.startswith("llama")
onnx.save(m, f"{folder}/model.onnx", save_as_external_data=external, all_tensors_to_one_file=True,
          location="model.onnx.data", size_threshold=1024)
import shutil
shutil.rmtree(raw)
print(json.dumps({"params": params, "nodes": len(m.graph.node)}))
'''

ORT = r'''
import sys, time, json
import numpy as np
t0 = time.perf_counter()
import onnxruntime as ort
t1 = time.perf_counter()
feeds = dict(np.load(sys.argv[2]))
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
t2 = time.perf_counter()
s.run(None, feeds)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "session_s": t2 - t1, "run_s": t3 - t2}))
'''


def rss_of(pid: int) -> int:
    """Resident bytes of ``pid`` now (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def measured(cmd: list[str], max_rss: float, timeout: float, env=None) -> dict:
    """Run ``cmd``; {wall_s, peak_rss (bytes, the child's ru_maxrss), rc, killed ('' or why), stdout, stderr}."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, start_new_session=True)
        killed = ""
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if rss_of(proc.pid) > max_rss * GIB:
                killed = f"killed at RSS > {max_rss:g} GiB"
            elif time.perf_counter() - t0 > timeout:
                killed = f"killed after {timeout:g} s"
            if killed:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {"wall_s": wall, "peak_rss": usage.ru_maxrss * 1024, "rc": proc.returncode, "killed": killed,
                "stdout": out.read(), "stderr": err.read()}


def export(name: str, work: Path, python: str) -> dict:
    folder = work / name
    meta = folder / "export.json"
    if meta.exists():
        return json.loads(meta.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    out = subprocess.run([python, "-c", EXPORT, name, str(folder)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"export of {name} failed: {out.stderr.strip().splitlines()[-1:]}")
    info = json.loads(out.stdout.strip().splitlines()[-1])
    info["export_s"] = time.perf_counter() - t0
    info["weight_bytes"] = sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith("model.onnx"))
    meta.write_text(json.dumps(info))
    return info


def gib(b: float) -> str:
    return f"{b / GIB:.2f} GiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated subset of {','.join(MODELS)}")
    ap.add_argument("--work", default="/tmp/scale", help="folder for exported models and reports")
    ap.add_argument("--max-rss", type=float, default=12.0, help="kill a child whose RSS passes this (GiB)")
    ap.add_argument("--timeout", type=float, default=900.0, help="kill a child after this many seconds")
    ap.add_argument("--python", default=sys.executable, help="a Python with torch for the export")
    ap.add_argument("--html", action="store_true", help="run `diagnose` (with HTML) instead of `compare`")
    ap.add_argument("--skip-ours", action="store_true", help="measure onnxruntime only")
    ap.add_argument("--keep", action="store_true", help="keep the exported models (default: deleted at the end)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bytecode import compile_toolkit

    compile_toolkit()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    npuscope = str(Path(sys.executable).parent / "npuscope")
    verb = "diagnose" if args.html else "compare"
    rows = []
    for name in args.models.split(","):
        info = export(name, work, args.python)
        model, feeds = work / name / "model.onnx", work / name / "inputs.npz"
        peer = measured([sys.executable, "-c", ORT, str(model), str(feeds)], args.max_rss, args.timeout)
        pt = json.loads(peer["stdout"].strip().splitlines()[-1]) if peer["rc"] == 0 else {}
        peer_s = pt.get("session_s", float("nan")) + pt.get("run_s", float("nan"))
        line = (f"{name}: {info['params'] / 1e9:.2f} B params, {gib(info['weight_bytes'])} weights, {info['nodes']} "
                f"nodes | onnxruntime FP32: session+run {peer_s:.1f} s (session {pt.get('session_s', 0):.1f}), "
                f"peak RSS {gib(peer['peak_rss'])}")
        row = {"model": name, **info, "ort_s": peer_s, "ort_rss": peer["peak_rss"]}
        if not args.skip_ours:
            out = work / name / f"report-{time.strftime('%H%M%S')}"
            ours = measured([npuscope, "--quiet", verb, str(model), "--inputs", str(feeds), "--out", str(out)],
                            args.max_rss, args.timeout)
            status = ours["killed"] or f"exit {ours['rc']}"
            if ours["rc"] not in (0, 1) and not ours["killed"]:
                status += f" ({(ours['stderr'].strip().splitlines() or [''])[-1][:200]})"
            ok = ours["rc"] in (0, 1) and not ours["killed"]  # 1: verdict FAIL, the run itself completed
            rr, tr = ours["peak_rss"] / peer["peak_rss"], ours["wall_s"] / peer_s
            line += (f" | npuscope {verb}: {ours['wall_s']:.1f} s, peak RSS {gib(ours['peak_rss'])}, {status} | "
                     f"RSS ratio {rr:.2f} (target <= 2: {'met' if ok and rr <= 2 else 'NOT met'}), time ratio "
                     f"{tr:.2f} (target <= 5: {'met' if ok and tr <= 5 else 'NOT met'})")
            row.update(ours_s=ours["wall_s"], ours_rss=ours["peak_rss"], ok=ok, status=status)
            shutil.rmtree(out, ignore_errors=True)
        print(line, flush=True)
        rows.append(row)
    project(rows)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def llama_bytes(layers: int, hidden: int, mlp: int, vocab: int) -> int:
    """FP32 weight bytes of a Llama-style decoder (attention 4 h^2, MLP 3 h m, two RMSNorms per layer; embedding
    and LM head v h each; final norm h)."""
    return 4 * (layers * (4 * hidden * hidden + 3 * hidden * mlp + 2 * hidden) + 2 * vocab * hidden + hidden)


def project(rows: list[dict]) -> None:
    """Peak RSS = a + b x weight bytes, fitted over the completed Llama runs, evaluated at Llama-2-7B's FP32
    weight bytes (activations at seq 128 are small beside the weights at this size)."""
    llama = [r for r in rows if r["model"].startswith("llama")]
    target = llama_bytes(**LLAMA7B)
    for side, key in (("onnxruntime", "ort_rss"), ("npuscope", "ours_rss")):
        pts = [(r["weight_bytes"], r[key]) for r in llama if key in r and r.get("ok", True)]
        if len(pts) < 2:
            print(f"7B projection ({side}): needs two completed Llama runs")
            continue
        n = len(pts)
        mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
        b = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
        a = my - b * mx
        print(f"7B projection ({side}): peak RSS ~ {gib(a)} + {b:.2f} x weight bytes -> {gib(a + b * target)} for "
              f"Llama-2-7B ({gib(target)} FP32 weights), from {n} Llama runs")


if __name__ == "__main__":
    main()
