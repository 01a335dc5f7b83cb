"""advisor analyze on a folder of many ranks: wall time and peak memory as the rank count grows.

Synthetic ranks are copies of one real multi-GPU trace (../shared/traces/hta), each with its own
rank in ``distributedInfo``; the last rank's collective launches are delayed, so the straggler
rule has something to find. Each ``advisor analyze FOLDER`` runs as a whole process (imports
included); memory is the peak resident set of the largest process of the run (the main one, or
one of the pool's workers, each of which holds one trace at a time). Each tool runs ``--repeats``
times per folder, alternating with the other: the median time and the highest peak are shown. With HTA installed
(``pip install HolisticTraceAnalysis``, not a dependency: in this interpreter or the one given by
``--hta-python``), its TraceAnalysis over the same folder is timed too, with the analyses
bench/trace_speed.py asks of it (idle time breakdown, kernel launch statistics).

Each tool is best installed into a venv of its own, as bench/trace_speed.py explains
(``--advisor-python``).

    python bench/ranks_scale.py [--ranks 2,8,32] [--hta-python VENV/bin/python] [--advisor-python VENV/bin/python]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = os.path.join(os.path.dirname(ROOT), "shared", "traces", "hta", "nccl_parser_config", "nccl_data.json.gz")


HTA = ("import sys\nfrom hta.trace_analysis import TraceAnalysis\n"
       "analysis = TraceAnalysis(trace_dir=sys.argv[1])\nanalysis.get_idle_time_breakdown(visualize=False)\n"
       "analysis.get_cuda_kernel_launch_stats(visualize=False)\n")


def main() -> None:
    from whole_process import compile_sources, measured  # bench/ is on the path when run as a script

    sys.path.insert(0, ROOT)
    from devkit.synthetic_ranks import make_ranks

    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", default="2,8,32")
    parser.add_argument("--repeats", type=int, default=3, help="runs per tool and folder, alternating; the median is shown")
    parser.add_argument("--hta-python", default=sys.executable, help="the interpreter HTA is installed for")
    parser.add_argument("--advisor-python", default=sys.executable, help="the interpreter advisor is installed for")
    args = parser.parse_args()
    if args.advisor_python == sys.executable:
        compile_sources()  # as an installed package has it
    has_hta = subprocess.run([args.hta_python, "-c", "import hta"], capture_output=True).returncode == 0
    print(f"{'ranks':>6} {'advisor s':>10} {'advisor MB':>11}"
          + (f" {'HTA s':>8} {'HTA MB':>8} {'faster':>7} {'memory':>7}" if has_hta else ""))
    for count in (int(n) for n in args.ranks.split(",")):
        with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as out:
            make_ranks(folder, count, BASE)
            ours, theirs = [], []
            for _ in range(max(1, args.repeats)):
                ours.append(measured([args.advisor_python, "-m", "advisor", "analyze", folder, "--out", out, "--format", "json"]))
                if has_hta:
                    theirs.append(measured([args.hta_python, "-c", HTA, folder]))
            wall, peak = statistics.median(s for s, _ in ours), max(m for _, m in ours)
            line = f"{count:>6} {wall:>10.2f} {peak:>11.0f}"
            if has_hta:
                hta_wall, hta_peak = statistics.median(s for s, _ in theirs), max(m for _, m in theirs)
                line += f" {hta_wall:>8.2f} {hta_peak:>8.0f} {hta_wall / wall:>6.1f}x {peak / hta_peak:>6.2f}x"
            print(line)


if __name__ == "__main__":
    main()
