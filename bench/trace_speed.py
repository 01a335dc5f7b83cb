"""advisor analyze vs Holistic Trace Analysis: wall time and peak memory on the same traces.

Run by hand (not by the tests); needs ``pip install holistictraceanalysis`` (not a dependency
of advisor) and the HTA fixtures in ../shared/traces/hta. Each tool runs in a fresh process
per trace: advisor parses the trace and runs every rule; HTA loads it and computes its idle
time breakdown and kernel launch statistics (the closest analyses to advisor's gpu-idle and
kernel-storm). Memory is the peak resident set growth over the process after its imports
(Linux: the peak is reset after the imports through /proc/self/clear_refs, then read as VmHWM).
Like for like, each tool is best installed the way a user has it, into a venv of its own, and
given here by ``--advisor-python`` and ``--hta-python``: a development interpreter adds its own
start-up (a .pth file importing certifi, advisor's editable-install finder: 40 ms here). Without
``--advisor-python``, this interpreter's advisor runs, its bytecode written first as an installed
package has it (HTA's is, by pip). An advisor venv without torch (``advisor analyze`` never
imports it): ``python -m venv V && V/bin/pip install --no-deps . && V/bin/pip install networkx
jinja2 click pydantic``.
A synthetic trace of about a million events is made by repeating the steps of a real one.
Each tool runs ``--repeats`` times per trace, alternating with the other, and the median run
is reported (this machine is shared and noisy; single runs of the small traces varied 20%).

    python bench/trace_speed.py [--events 1000000] [--repeats 5] [--hta-python VENV/bin/python]
                                [--advisor-python VENV/bin/python]
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import subprocess
import sys
import tempfile

from whole_process import compile_sources, measured

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "traces", "hta")
TRACES = [
    "nccl_parser_config/nccl_data.json.gz",
    "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
]

PEAK = """
def _rss_kb(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1])
def reset_peak():
    open("/proc/self/clear_refs", "w").write("5")
    return _rss_kb("VmRSS")
def peak_mb(base):
    return (_rss_kb("VmHWM") - base) / 1024
"""

ADVISOR = PEAK + """
import json, sys, time
from advisor.capture.recorded import evidence_from_traces
from advisor.rulekit.engine import load_rules, run_rules
from advisor.trace.parse import parse_trace
rules = load_rules()
base = reset_peak()
start = time.perf_counter()
evidence = evidence_from_traces(parse_trace({path!r}))
findings, _ = run_rules(rules, evidence)
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "peak_mb": peak_mb(base), "findings": len(findings)}}))
"""

HTA = PEAK + """
import json, logging, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
base = reset_peak()
start = time.perf_counter()
analyzer = TraceAnalysis(trace_dir={folder!r})
analyzer.get_idle_time_breakdown(visualize=False)
analyzer.get_cuda_kernel_launch_stats(visualize=False)
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "peak_mb": peak_mb(base)}}))
"""


def run(code: str, python: str = sys.executable) -> dict:
    with tempfile.TemporaryDirectory() as scratch:  # not this checkout's folder: its advisor would shadow the installed one
        completed = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=3600, cwd=scratch)
    lines = [line for line in completed.stdout.splitlines() if line.startswith("{")]
    if completed.returncode != 0 or not lines:
        return {"error": (completed.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(lines[-1])


def synthetic(source: str, events: int, folder: str) -> str:
    """Repeat the trace's events, shifted in time and with fresh ids, until ``events`` are reached."""
    document = json.load(gzip.open(source))
    original = document["traceEvents"]
    timed = [e for e in original if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    repeated, copies = [], max(1, events // len(original))
    for n in range(copies):
        for event in original:
            if n and event.get("ph") == "M":
                continue
            clone = copy.copy(event)
            if isinstance(clone.get("ts"), (int, float)):
                clone["ts"] = clone["ts"] + n * span
            if isinstance(clone.get("args"), dict):
                args = dict(clone["args"])
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int):
                        args[key] += n * 10_000_000
                clone["args"] = args
            if isinstance(clone.get("id"), int):
                clone["id"] += n * 10_000_000
            if isinstance(clone.get("name"), str) and clone["name"].startswith("ProfilerStep#"):
                clone["name"] = f"ProfilerStep#{n}_{clone['name'].split('#')[1]}"
            repeated.append(clone)
    document["traceEvents"] = repeated
    path = os.path.join(folder, "rank-0.json.gz")
    with gzip.open(path, "wt") as handle:
        json.dump(document, handle)
    return path


def _median_run(runs: list[dict]) -> dict:
    """The run with the median time (its own peak memory alongside); an error if any run failed."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return ordered[len(ordered) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5, help="runs per tool and trace (3 at most for the synthetic)")
    parser.add_argument("--hta-python", default=sys.executable,
                        help="the interpreter HTA is installed for (e.g. a venv of its own: its pandas/jupyter stack)")
    parser.add_argument("--advisor-python", default=sys.executable, help="the interpreter advisor is installed for")
    args = parser.parse_args()
    if args.advisor_python == sys.executable:
        compile_sources()
    rows, wholes = [], []
    with tempfile.TemporaryDirectory() as scratch:
        cases = []
        for relative in TRACES:
            folder = os.path.join(scratch, relative.split("/")[0])
            os.makedirs(folder)
            path = os.path.join(folder, "rank-0.json.gz")
            with open(os.path.join(SHARED, relative), "rb") as src, open(path, "wb") as dst:
                dst.write(src.read())
            cases.append((relative.split("/")[0], folder, path))
        big = os.path.join(scratch, "synthetic")
        os.makedirs(big)
        path = synthetic(os.path.join(SHARED, TRACES[1]), args.events, big)
        count = sum(1 for _ in json.load(gzip.open(path))["traceEvents"])
        cases.append((f"synthetic ({count:,} events)", big, path))
        for name, folder, path in cases:
            repeats = min(args.repeats, 3) if name.startswith("synthetic") else args.repeats
            ours_runs, theirs_runs, ours_whole, theirs_whole = [], [], [], []
            for _ in range(max(1, repeats)):
                ours_runs.append(run(ADVISOR.format(path=path), args.advisor_python))
                theirs_runs.append(run(HTA.format(folder=folder), args.hta_python))
                ours_whole.append(measured([args.advisor_python, "-m", "advisor", "analyze", path, "--format", "json",
                                            "--out", os.path.join(scratch, "out")]))
                theirs_whole.append(measured([args.hta_python, "-c", HTA.format(folder=folder)]))
            rows.append((name, _median_run(ours_runs), _median_run(theirs_runs)))
            wholes.append((name, sorted(ours_whole)[len(ours_whole) // 2], sorted(theirs_whole)[len(theirs_whole) // 2]))
            print(f"  measured {name}", file=sys.stderr)
    print("in-process (after imports):")
    print(f"{'trace':<34} {'advisor s':>9} {'HTA s':>8} {'faster':>7} {'advisor MB':>11} {'HTA MB':>8} {'memory':>7}")
    for name, ours, theirs in rows:
        if "error" in ours or "error" in theirs:
            print(f"{name:<34} advisor: {ours.get('error', 'ok')} | HTA: {theirs.get('error', 'ok')}")
            continue
        print(f"{name:<34} {ours['seconds']:>9.2f} {theirs['seconds']:>8.2f} {theirs['seconds'] / ours['seconds']:>6.1f}x "
              f"{ours['peak_mb']:>11.0f} {theirs['peak_mb']:>8.0f} {ours['peak_mb'] / max(theirs['peak_mb'], 1):>6.2f}x")
    print("whole process, as a user waits (imports included; peak of the largest process):")
    for name, (ours_s, ours_mb), (theirs_s, theirs_mb) in wholes:
        print(f"{name:<34} {ours_s:>9.2f} {theirs_s:>8.2f} {theirs_s / ours_s:>6.1f}x "
              f"{ours_mb:>11.0f} {theirs_mb:>8.0f} {ours_mb / max(theirs_mb, 1):>6.2f}x")


if __name__ == "__main__":
    main()
