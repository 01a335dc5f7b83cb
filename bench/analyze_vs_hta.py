"""``advisor analyze`` against Holistic Trace Analysis, whole processes as a user waits for them (interpreter start,
imports, reading, analysis, exit), on HTA's own test traces and on a folder of synthetic ranks.

HTA runs the three analyses its users start with: the idle time breakdown, the kernel launch statistics and the
temporal breakdown. Each tool is given as the interpreter of a venv of its own: ``--hta`` may be named several
times (HTA 0.5 is ``pip install HolisticTraceAnalysis==0.5.0``; its successor ``pip install traceinsight==0.6.0``,
which installs the same ``hta`` package). Wall time and the peak resident set of the largest process
(bench/whole_process.py); each tool runs ``--repeats`` times per input, alternating, and the medians are shown.

    python bench/analyze_vs_hta.py --hta hta05=VENV/bin/python --hta ti06=VENV2/bin/python [--ranks 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from whole_process import ROOT, compile_sources, measured

SHARED = os.path.join(os.path.dirname(ROOT), "shared", "traces", "hta")
TRACES = {"nccl_data (27k events)": "nccl_parser_config/nccl_data.json.gz",
          "ns_resolution (69k events)": "ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"}
HTA = ("import sys, logging, warnings\nwarnings.filterwarnings('ignore')\nlogging.disable(logging.CRITICAL)\n"
       "from hta.trace_analysis import TraceAnalysis\nanalysis = TraceAnalysis(trace_dir=sys.argv[1])\n"
       "analysis.get_idle_time_breakdown(visualize=False)\nanalysis.get_cuda_kernel_launch_stats(visualize=False)\n"
       "analysis.get_temporal_breakdown(visualize=False)\n")


def _inputs(scratch: str, ranks: int) -> list[tuple[str, str]]:
    """(name, folder) per input: HTA reads a folder, so each trace gets one of its own (a link to it)."""
    found = []
    for name, relative in TRACES.items():
        folder = os.path.join(scratch, name.split()[0])
        os.makedirs(folder)
        os.symlink(os.path.join(SHARED, relative), os.path.join(folder, "rank-0.json.gz"))
        found.append((name, folder))
    if ranks:
        sys.path.insert(0, ROOT)
        from devkit.synthetic_ranks import make_ranks

        folder = os.path.join(scratch, f"ranks{ranks}")
        os.makedirs(folder)
        make_ranks(folder, ranks, os.path.join(SHARED, TRACES["nccl_data (27k events)"]))
        found.append((f"folder of {ranks} ranks", folder))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hta", action="append", default=[], help="NAME=PYTHON: an interpreter HTA is installed for")
    parser.add_argument("--advisor-python", default=sys.executable)
    parser.add_argument("--ranks", type=int, default=8, help="synthetic ranks in the folder input (0: none)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    others = [tuple(given.split("=", 1)) for given in args.hta]
    if args.advisor_python == sys.executable:
        compile_sources()
    print(f"{'input':28} {'advisor':>12}" + "".join(f" {name:>12} {'faster':>7} {'memory':>7}" for name, _ in others))
    with tempfile.TemporaryDirectory() as scratch:
        for name, folder in _inputs(scratch, args.ranks):
            out = os.path.join(scratch, "out")
            target = folder if name.startswith("folder") else os.path.join(folder, "rank-0.json.gz")
            runs: dict[str, list[tuple[float, float]]] = {"advisor": [], **{n: [] for n, _ in others}}
            for _ in range(args.repeats):
                runs["advisor"].append(measured([args.advisor_python, "-m", "advisor", "analyze", target, "--out", out,
                                                 "--format", "json"]))
                for other, python in others:
                    runs[other].append(measured([python, "-c", HTA, folder]))
            ours_s, ours_mb = (statistics.median(r[i] for r in runs["advisor"]) for i in (0, 1))
            line = f"{name:28} {ours_s:5.2f}s {ours_mb:4.0f}MB"
            for other, _ in others:
                their_s, their_mb = (statistics.median(r[i] for r in runs[other]) for i in (0, 1))
                line += f" {their_s:5.2f}s {their_mb:4.0f}MB {their_s / ours_s:6.1f}x {ours_mb / their_mb:6.2f}x"
            print(line, flush=True)


if __name__ == "__main__":
    main()
