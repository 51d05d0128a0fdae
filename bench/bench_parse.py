"""parse-log throughput against pandas.read_csv and json.load, measured side by side on the same data.

Generates in a temporary folder (deleted afterwards):
  - a plog file of N lines (default 1,000,000) in npuscope's line format (toolkit.logs.plog), levels and modules
    mixed, 1 line in 10,000 malformed; the same records as a CSV (Level, Module, PID, Process, Time, File,
    Line, Message);
  - an onnxruntime-profile-shaped JSON of about M MB (default 200): one event per line, node events named
    <node>_kernel_time with onnxruntime's args (op_name, provider, shapes, thread_scheduling_stats, ...) and
    model_run session events.
Timed (best of R runs each, interleaved):
  - toolkit.logs.parsers.plog_lines.parse(log)  vs  pandas.read_csv(csv of the same records)
    (and pandas.read_csv of the log itself as one text column, a lower bound on just splitting lines);
  - toolkit.logs.parsers.ort_profile.parse(json) vs json.load(json) (the load alone, no table);
  - toolkit.logs.parsers.op_summary_csv.parse(wide csv) vs pandas.read_csv(same file, dtype=str): an op_summary
    CSV of 4 rows and W extra columns (default 200,000), which used to take minutes (per-column assignment,
    quadratic in the columns).
Prints MB/s of each and the ratio ours / peer in throughput (> 1: ours is faster).

Timeline (``--timeline-mb``, default 1024; 0 skips it): an msprof-shaped timeline JSON of that size (process
metadata for Ascend Hardware / CANN / Overlap Analysis; device tasks with Task Id / Physic Stream Id args, host
API spans, overlap spans) parsed by toolkit.logs.parsers.chrome_trace (streamed with ijson) in a child process
whose peak RSS (ru_maxrss) is reported and checked against 500 MiB; peer: json.load in another child on a
``--peer-mb`` (default 200) file of the same events (json.load of 1 GB would need several GB), ratio in MB/s.

Long op_summary CSV (``--csv-rows``, default 300,000; 0 skips it): the device profiler's 27-column op_summary
export (quoted shape cells, tab-suffixed start times, N/A cells) of that many rows, parsed by
toolkit.logs.parsers.op_summary_csv in a child process (CPU s, peak RSS), beside pandas.read_csv(dtype=str) of the
same file in another child (the peer only splits the cells: no typing, checks or op-summary columns).

Compare result CSV (``--compare-rows``, default 200,000; 0 skips it): the compare tool's result CSV (msaccucmp's 21
columns, one row over the cosine line), parsed and judged by toolkit.logs.parsers.msaccucmp_csv in a child
process, beside pandas.read_csv(dtype=str) of the same file in another child.

Usage: python bench/bench_parse.py [--lines 1000000] [--mb 200] [--wide 200000] [--runs 3] [--timeline-mb 1024]
       [--peer-mb 200] [--only-timeline] [--csv-rows 300000] [--only-csv] [--compare-rows 200000]
       [--only-compare]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

LEVELS = ["DEBUG", "INFO", "INFO", "INFO", "WARNING", "ERROR"]
MODULES = ["COMPILER", "RUNTIME", "PROFILE", "LOGS", "MEMORY"]
OPS = ["Conv", "Relu", "MatMul", "Add", "Softmax", "Cast", "LayerNormalization", "Reshape"]


def write_log(folder: Path, n: int) -> tuple[Path, Path]:
    from toolkit.logs.plog import plog_time

    rng = random.Random(0)
    log, table = folder / "big.log", folder / "big.csv"
    t0 = 1.7e9
    with open(log, "w") as fl, open(table, "w", newline="") as fc:
        w = csv.writer(fc)
        w.writerow(["Level", "Module", "PID", "Process", "Time", "File", "Line", "Message"])
        for i in range(n):
            if i % 10_000 == 9_999:
                fl.write("this line is not a plog record\n")
                continue
            rec = [rng.choice(LEVELS), rng.choice(MODULES), 4242, "npuscope", plog_time(t0 + i * 1e-4),
                   "pipeline.py", rng.randrange(1, 400),
                   f"kernel k_{rng.randrange(1000)} ({rng.choice(OPS)}) ran in {rng.random():.4f} ms"]
            fl.write(f"[{rec[0]}] {rec[1]}({rec[2]},{rec[3]}):{rec[4]} [{rec[5]}:{rec[6]}]{rec[7]}\n")
            w.writerow(rec)
    return log, table


def _node_event(i: int, rng: random.Random, ts: int) -> dict:
    op = rng.choice(OPS)
    return {"cat": "Node", "pid": 4242, "tid": 4242, "dur": rng.randrange(1, 500), "ts": ts, "ph": "X",
            "name": f"node_{i % 5000}_kernel_time",
            "args": {"op_name": op, "provider": "CPUExecutionProvider", "node_index": str(i % 5000),
                     "activation_size": "1024", "parameter_size": "0", "output_size": "65536",
                     "input_type_shape": [{"float": [1, 64, 56, 56]}, {"float": [64, 64, 3, 3]}],
                     "output_type_shape": [{"float": [1, 64, 56, 56]}],
                     "thread_scheduling_stats": {"main_thread": {"thread_pool_name": "session-1-intra-op",
                                                                 "thread_id": "140068153506688", "block_size": [],
                                                                 "core": -1, "Distribution": 0, "Run": 0}},
                     "mem_bytes_in_use": "17408", "mem_arena_held": "1064960"}}


def write_profile(folder: Path, mb: int) -> Path:
    rng = random.Random(1)
    path, target, size, i, ts = folder / "ort_profile.json", mb * 1024 * 1024, 0, 0, 0
    with open(path, "w") as fh:
        fh.write("[\n")
        first = True
        while size < target:
            if i % 200 == 199:
                ev = {"cat": "Session", "pid": 4242, "tid": 4242, "dur": 20_000, "ts": ts, "ph": "X",
                      "name": "model_run", "args": {}}
            else:
                ev = _node_event(i, rng, ts)
            line = ("" if first else ",\n") + json.dumps(ev, separators=(",", " :"))
            fh.write(line)
            size += len(line)
            first, i, ts = False, i + 1, ts + 100
        fh.write("\n]\n")
    return path


def write_wide_csv(folder: Path, extra: int) -> Path:
    """An op_summary CSV (the profiler's columns) with ``extra`` more columns and 4 rows of formula-like text."""
    from toolkit.profile.optable import OP_SUMMARY_COLUMNS

    path = folder / "op_summary_wide.csv"
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(list(OP_SUMMARY_COLUMNS) + [f"extra_{i}" for i in range(extra)])
        for k in range(4):
            base = {"Op Name": f"conv{k}", "OP Type": "Conv2D", "Task Type": "AI_CORE", "Task Duration(us)": "12.5",
                    "Task Start Time(us)": str(100 * k), "Task Wait Time(us)": "0"}
            w.writerow([base.get(c, "1") for c in OP_SUMMARY_COLUMNS] + ["=1"] * extra)
    return path


TIMELINE_HEAD = ('[{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"Ascend Hardware"}},'
                 '{"name":"process_name","ph":"M","pid":2,"tid":0,"args":{"name":"CANN"}},'
                 '{"name":"process_name","ph":"M","pid":3,"tid":0,"args":{"name":"Overlap Analysis"}}')
DEVICE_OPS = [("Conv2D", "AI_CORE"), ("Relu", "AI_VECTOR_CORE"), ("MatMulV2", "AI_CORE"), ("TransData", "AI_CORE"),
              ("SoftmaxV2", "AI_VECTOR_CORE"), ("Cast", "AI_VECTOR_CORE")]


def write_timeline(path: Path, mb: int) -> int:
    """An msprof-shaped timeline of about ``mb`` MiB; returns the number of device tasks."""
    rng = random.Random(2)
    target, size, i, ts, tasks = mb * 2 ** 20, 0, 0, 1_700_000_000_000_000.0, 0
    with open(path, "w") as fh:
        fh.write(TIMELINE_HEAD)
        chunk = []
        while size < target:
            op, core = DEVICE_OPS[i % len(DEVICE_OPS)]
            dur = rng.randrange(2, 400) / 4
            if i % 10 == 9:
                line = (f',{{"name":"aclnn{op}","pid":2,"tid":77,"ts":"{ts:.3f}","dur":{dur},"ph":"X",'
                        f'"args":{{"Thread Id":77,"Mode":"ACL_OP","level":"acl"}}}}')
            elif i % 50 == 49:
                line = f',{{"name":"Computing","pid":3,"tid":0,"ts":"{ts:.3f}","dur":{dur * 5},"ph":"X","args":{{}}}}'
            else:
                tasks += 1
                line = (f',{{"name":"{op}_{i % 3000}","pid":1,"tid":{i % 4},"ts":"{ts:.3f}","dur":{dur},"ph":"X",'
                        f'"args":{{"Model Id":1,"Task Type":"{core}","Physic Stream Id":{i % 4},"Task Id":{i % 65536},'
                        f'"Batch Id":0,"Subtask Id":4294967295,"connection_id":{i}}}}}')
            chunk.append(line)
            size += len(line)
            ts += dur + 1.25
            i += 1
            if len(chunk) == 10_000:
                fh.write("".join(chunk))
                chunk = []
        fh.write("".join(chunk) + "]\n")
    return tasks


#: the profiler's op_summary header (27 columns, msprof's export) and row shapes for :func:`write_op_summary`
OP_SUMMARY_HEAD = ("Device_id,Model Name,Model ID,Task ID,Stream ID,Infer ID,Op Name,OP Type,OP State,Task Type,"
                   "Task Start Time(us),Task Duration(us),Task Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,"
                   "Input Shapes,Input Data Types,Input Formats,Output Shapes,Output Data Types,Output Formats,"
                   "Context ID,aicore_time(us),aic_total_cycles,aiv_time(us),cube_utilization(%)")
OP_SUMMARY_OPS = [("TransData", "AI_VECTOR_CORE", '"""1,3,224,224"""', "FLOAT16", "NCHW", '"""1,1,224,224,16"""'),
                  ("Conv2D", "AI_CORE", '"""1,1,224,224,16;4,4,16,16"""', "FLOAT16;FLOAT16", "NC1HWC0;FRACTAL_Z",
                   '"""1,4,112,112,16"""'),
                  ("Relu", "AI_VECTOR_CORE", '"""1,4,112,112,16"""', "FLOAT16", "NC1HWC0", '"""1,4,112,112,16"""'),
                  ("MatMulV2", "AI_CORE", '"""1,2048;2048,1000"""', "FLOAT16;FLOAT16", "ND;ND", '"""1,1000"""')]


def write_op_summary(path: Path, rows: int) -> None:
    """A profiler-shaped op_summary CSV of ``rows`` rows (names unique per row, shapes and types repeated)."""
    rng = random.Random(3)
    ts = 1_700_000_000_000.0
    with open(path, "w", newline="") as fh:
        fh.write(OP_SUMMARY_HEAD + "\r\n")
        chunk = []
        for i in range(rows):
            op, core, ishape, dtypes, fmts, oshape = OP_SUMMARY_OPS[i % len(OP_SUMMARY_OPS)]
            dur = rng.randrange(100, 40_000) / 100
            chunk.append(f"0,resnet50,1,{i % 65536},{2 + i % 3},0,layer{i // 4}/{op}_{i},{op},dynamic,{core},"
                         f"{ts:.3f}\t,{dur},0,{rng.choice((1, 8, 16, 32))},0,NO,{ishape},{dtypes},{fmts},{oshape},"
                         f"FLOAT16,NC1HWC0,N/A,{dur * 0.9:.2f},123456,N/A,45.3\r\n")
            ts += dur + 1.5
            if len(chunk) == 10_000:
                fh.write("".join(chunk))
                chunk = []
        fh.write("".join(chunk))


def side_by_side(path: Path, rows: int, runs: int, kind: str, title: str, label: str) -> tuple[dict, dict]:
    """Best of ``runs`` child runs of our parser (child kind ``kind``) and of pandas.read_csv(dtype=str) on
    ``path`` (``rows`` records, checked on both), printed as one table under ``title``: CPU s, wall s, MB/s,
    peak RSS (MiB) and RSS per MiB of file. Returns (ours, peer)."""
    mib = path.stat().st_size / 2 ** 20
    ours = min((run_child(kind, path) for _ in range(runs)), key=lambda r: r["seconds"])
    peer = min((run_child("pandas-csv", path) for _ in range(runs)), key=lambda r: r["seconds"])
    assert ours["records"] == peer["records"] == rows, (ours["records"], peer["records"], rows)
    print(f"\n{title}: {rows:,} rows, {mib:.1f} MiB; seconds are the child's CPU seconds")
    print(f"{'parse':<40}{'CPU s':>8}{'wall s':>8}{'MB/s':>8}{'peak RSS MiB':>14}{'RSS/file':>10}")
    for name, r in ((label, ours), ("pandas.read_csv(dtype=str)", peer)):
        print(f"{name:<40}{r['seconds']:>8.1f}{r['wall']:>8.1f}{path.stat().st_size / 1e6 / r['seconds']:>8.1f}"
              f"{r['rss_mib']:>14.0f}{r['rss_mib'] / mib:>10.1f}")
    return ours, peer


def csv_bench(folder: Path, rows: int, runs: int) -> None:
    path = folder / "op_summary_long.csv"
    write_op_summary(path, rows)
    ours, peer = side_by_side(path, rows, runs, "ours-csv", "op_summary CSV", "ours (op_summary_csv.parse)")
    print(f"throughput ratio ours / pandas: {peer['seconds'] / ours['seconds']:.2f}; "
          f"peak RSS ours / pandas: {ours['rss_mib'] / peer['rss_mib']:.2f}")


COMPARE_HEAD = ("Index,OpType,NPUDump,DataType,Address,GroundTruth,DataType,TensorIndex,Shape,OverFlow,CosineSimilarity,"
                "MaxAbsoluteError,AccumulatedRelativeError,RelativeEuclideanDistance,KullbackLeiblerDivergence,"
                "StandardDeviation,MeanAbsoluteError,RootMeanSquareError,MaxRelativeError,MeanRelativeError,"
                "CompareFailReason")


def write_compare(path: Path, rows: int) -> None:
    """A compare tool result CSV (msaccucmp's columns) of ``rows`` rows, one of them over the cosine line."""
    with open(path, "w", newline="") as fh:
        fh.write(COMPARE_HEAD + "\n")
        for i in range(rows):
            n = f"model/block{i // 100}/layer{i % 100}/conv:0"
            cos = 0.95 if i == rows * 3 // 4 else 0.9999
            fh.write(f"{i},Conv2D,{n},float16,{hex(0x1000 + i * 64)},{n},float32,{n}:output:0,\"[1, 64, 56, 56]\",NO,"
                     f"{cos},0.01,1.0,0.001,1e-05,\"(0.1;1.0),(0.1;1.0)\",0.001,0.001,0.1,0.001,\n")


def compare_bench(folder: Path, rows: int, runs: int) -> None:
    path = folder / "result_long.csv"
    write_compare(path, rows)
    ours, peer = side_by_side(path, rows, runs, "ours-compare", "compare result CSV", "ours (msaccucmp_csv.parse)")
    print(f"throughput ratio ours / pandas: {peer['seconds'] / ours['seconds']:.2f}")


def child(kind: str, path: str) -> None:
    """Run one side in this (child) process; print {"seconds", "rss_mib", "records"} as JSON."""
    t, cpu0 = time.perf_counter(), time.process_time()
    extra = {}
    if kind == "ours-csv":
        from toolkit.logs.parsers import op_summary_csv

        records = op_summary_csv.parse(Path(path)).records
    elif kind == "ours-compare":
        from toolkit.logs.parsers import msaccucmp_csv

        records = msaccucmp_csv.parse(Path(path)).records
    elif kind == "pandas-csv":
        import pandas as pd

        records = len(pd.read_csv(path, dtype=str))
    elif kind == "ours":
        from toolkit.logs.parsers import chrome_trace

        res = chrome_trace.parse(Path(path))
        records = int((res.op_summary["Time Kind"] == "device").sum())
        extra = {"malformed": res.malformed, "notes": res.notes}
    else:
        with open(path) as fh:
            events = json.load(fh)
        records = sum(1 for e in events if e.get("pid") == 1 and e.get("ph") == "X")
        extra = {}
    print(json.dumps({"wall": time.perf_counter() - t, "seconds": time.process_time() - cpu0, "records": records,
                      "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}))


def run_child(kind: str, path: Path) -> dict:
    import subprocess

    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, str(path)], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def timeline_bench(folder: Path, mb: int, peer_mb: int, runs: int) -> None:
    big, small = folder / "msprof_big.json", folder / "msprof_peer.json"
    t = time.perf_counter()
    tasks = write_timeline(big, mb)
    peer_tasks = write_timeline(small, peer_mb)
    print(f"timeline generated in {time.perf_counter() - t:.1f} s: {big.stat().st_size / 2**20:.0f} MiB "
          f"({tasks:,} device tasks), peer file {small.stat().st_size / 2**20:.0f} MiB ({peer_tasks:,})")
    ours = min((run_child("ours", big) for _ in range(runs)), key=lambda r: r["seconds"])
    assert ours["records"] == tasks, (ours["records"], tasks)
    ours_small = min((run_child("ours", small) for _ in range(runs)), key=lambda r: r["seconds"])
    peer = min((run_child("json", small) for _ in range(runs)), key=lambda r: r["seconds"])
    assert ours_small["records"] == peer["records"] == peer_tasks
    mbps = lambda f, r: f.stat().st_size / 1e6 / r["seconds"]  # noqa: E731
    print("\nseconds are CPU seconds of the child (time.process_time): the machine is shared, wall time is not")
    print(f"{'timeline':<28}{'s':>8}{'MB/s':>8}{'peak RSS MiB':>14}")
    print(f"{'ours, ' + str(mb) + ' MiB (streamed)':<28}{ours['seconds']:>8.1f}{mbps(big, ours):>8.1f}"
          f"{ours['rss_mib']:>14.0f}")
    print(f"{'ours, ' + str(peer_mb) + ' MiB':<28}{ours_small['seconds']:>8.1f}{mbps(small, ours_small):>8.1f}"
          f"{ours_small['rss_mib']:>14.0f}")
    print(f"{'json.load, ' + str(peer_mb) + ' MiB':<28}{peer['seconds']:>8.1f}{mbps(small, peer):>8.1f}"
          f"{peer['rss_mib']:>14.0f}")
    print(f"throughput ratio ours ({mb} MiB) / json.load ({peer_mb} MiB): {mbps(big, ours) / mbps(small, peer):.2f}; "
          f"same file ({peer_mb} MiB): {mbps(small, ours_small) / mbps(small, peer):.2f}")
    verdict = "within" if ours["rss_mib"] <= 500 else "OVER"
    print(f"peak RSS of the {mb} MiB parse: {ours['rss_mib']:.0f} MiB ({verdict} the 500 MiB bound)")


def duel(ours, peer, runs: int) -> tuple[float, object, float, object]:
    """Best-of-``runs`` seconds of ``ours`` and ``peer``, runs interleaved (ours, peer, ours, ...); the previous
    result is freed before each timed call, so neither pays for the other's deallocation."""
    t_ours, t_peer, out_ours, out_peer = [], [], None, None
    for _ in range(runs):
        out_ours = None
        t = time.perf_counter()
        out_ours = ours()
        t_ours.append(time.perf_counter() - t)
        out_peer = None
        t = time.perf_counter()
        out_peer = peer()
        t_peer.append(time.perf_counter() - t)
    return min(t_ours), out_ours, min(t_peer), out_peer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--wide", type=int, default=200_000, help="extra columns of the wide CSV (0: skip it)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--timeline-mb", type=int, default=1024, help="size of the timeline JSON (0: skip it)")
    ap.add_argument("--peer-mb", type=int, default=200, help="size of the file json.load reads")
    ap.add_argument("--only-timeline", action="store_true", help="run the timeline part only")
    ap.add_argument("--csv-rows", type=int, default=300_000, help="rows of the long op_summary CSV (0: skip it)")
    ap.add_argument("--only-csv", action="store_true", help="run the long op_summary CSV part only")
    ap.add_argument("--compare-rows", type=int, default=200_000, help="rows of the compare result CSV (0: skip it)")
    ap.add_argument("--only-compare", action="store_true", help="run the compare result CSV part only")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child)
    if args.only_csv:
        with tempfile.TemporaryDirectory(prefix="bench_parse_") as tmp:
            return csv_bench(Path(tmp), args.csv_rows, args.runs)
    if args.only_compare:
        with tempfile.TemporaryDirectory(prefix="bench_parse_") as tmp:
            return compare_bench(Path(tmp), args.compare_rows, args.runs)
    if args.only_timeline:
        with tempfile.TemporaryDirectory(prefix="bench_parse_") as tmp:
            return timeline_bench(Path(tmp), args.timeline_mb, args.peer_mb, args.runs)
    import pandas as pd

    from toolkit.logs.parsers import op_summary_csv, ort_profile, plog_lines

    with tempfile.TemporaryDirectory(prefix="bench_parse_") as tmp:
        folder = Path(tmp)
        t = time.perf_counter()
        log, table = write_log(folder, args.lines)
        prof = write_profile(folder, args.mb)
        print(f"generated in {time.perf_counter() - t:.1f} s: {log.name} {log.stat().st_size / 2**20:.1f} MiB "
              f"({args.lines:,} lines), {table.name} {table.stat().st_size / 2**20:.1f} MiB, "
              f"{prof.name} {prof.stat().st_size / 2**20:.1f} MiB")
        rows = []
        ours, res, peer, df = duel(lambda: plog_lines.parse(log), lambda: pd.read_csv(table), args.runs)
        _, _, lines_only, _ = duel(lambda: None, lambda: pd.read_csv(log, sep="\x01", header=None,
                                                                     quoting=csv.QUOTE_NONE), args.runs)
        assert res.records == len(df), (res.records, len(df))
        del df
        rows.append(("plog log", log, ours, "pandas.read_csv(same records as CSV)", table, peer))
        rows.append(("plog log", log, ours, "pandas.read_csv(log, one text column)", log, lines_only))
        print(f"plog: {res.records:,} records, {res.malformed:,} malformed")

        def load():
            with open(prof) as fh:
                return json.load(fh)

        ours, res, peer, events = duel(lambda: ort_profile.parse(prof), load, args.runs)
        n_nodes = sum(1 for e in events if e["cat"] == "Node")
        assert len(res.op_summary) == n_nodes, (len(res.op_summary), n_nodes)
        del events
        rows.append(("onnxruntime profile", prof, ours, "json.load(same file)", prof, peer))
        print(f"ort profile: {len(res.op_summary):,} node events, {res.malformed} malformed")
        if args.wide:
            wide = write_wide_csv(folder, args.wide)
            ours, res, peer, df = duel(lambda: op_summary_csv.parse(wide), lambda: pd.read_csv(wide, dtype=str),
                                       args.runs)
            assert len(res.op_summary) == len(df) == 4, (len(res.op_summary), len(df))
            rows.append((f"csv, {df.shape[1]:,} cols", wide, ours, "pandas.read_csv(same file, dtype=str)", wide, peer))
            del df
        print(f"\n{'input':<22}{'ours s':>8}{'ours MB/s':>11}  {'peer':<40}{'peer s':>8}{'peer MB/s':>11}{'ratio':>8}")
        for name, f_ours, t_ours, peer_name, f_peer, t_peer in rows:
            mb_ours, mb_peer = f_ours.stat().st_size / 1e6 / t_ours, f_peer.stat().st_size / 1e6 / t_peer
            print(f"{name:<22}{t_ours:>8.2f}{mb_ours:>11.1f}  {peer_name:<40}{t_peer:>8.2f}{mb_peer:>11.1f}"
                  f"{mb_ours / mb_peer:>8.2f}")
        print(f"\nratio = our MB/s / peer MB/s (> 1: ours faster). Peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        if args.csv_rows:
            csv_bench(folder, args.csv_rows, args.runs)
        if args.compare_rows:
            compare_bench(folder, args.compare_rows, args.runs)
        if args.timeline_mb:
            timeline_bench(folder, args.timeline_mb, args.peer_mb, args.runs)


if __name__ == "__main__":
    main()
