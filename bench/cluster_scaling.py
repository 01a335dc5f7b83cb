"""``advisor analyze`` of a folder of many ranks: the local process pool against a Dask cluster of 1, 2, ... workers.

Run by hand. Writes ``--ranks`` synthetic ranks (devkit/synthetic_ranks.py: copies of one real trace, the last rank
launching its collectives late) and times the whole ``advisor analyze`` process on them: once with its local pool,
then with ``--cluster`` pointed at a LocalCluster of N single-threaded worker processes on this machine (a real
cluster's workers are other machines; here they share its cores, so this shows the path's overhead and its memory
per worker, not the speed of many machines). For each: wall time, the advisor process's peak resident set and
each worker's (``VmHWM``), with the peak of parsing one rank's
summary alone for comparison: a worker holds one rank at a time. The reports must be the same but for their
creation time.

    python bench/cluster_scaling.py [--ranks 256] [--workers 1,2] [--base TRACE.json.gz]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from whole_process import ROOT, compile_sources, measured

sys.path.insert(0, ROOT)
from devkit.synthetic_ranks import make_ranks  # noqa: E402

SHARED_BASE = os.path.join(os.path.dirname(ROOT), "shared", "traces", "hta", "nccl_parser_config", "nccl_data.json.gz")
OWN_BASE = os.path.join(ROOT, "tests", "data", "ddp", "ddp_train.trace.json.gz")
ONE_RANK = ("import sys\nsys.path.insert(0, {root!r})\nfrom advisor.trace.ranks import summarize_file\n"
            "summarize_file({path!r})\nprint(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n")


def peak_mb() -> float:
    """This process's peak resident set (VmHWM, which starts again at exec: ru_maxrss keeps the forking parent's)."""
    with open("/proc/self/status", encoding="ascii") as status:
        return int(status.read().split("VmHWM:")[1].split()[0]) / 1024


def analyze(folder: str, out: str, cluster: str | None) -> tuple[float, float, dict]:
    """Wall seconds, the largest peak MB of the advisor process and its own pool, and the report (less its
    creation time)."""
    command = [sys.executable, "-m", "advisor", "analyze", folder, "--format", "json", "--out", out]
    seconds, peak_mb = measured(command + (["--cluster", cluster] if cluster else []))
    with open(os.path.join(out, "rank000.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    report.pop("created", None)
    return seconds, peak_mb, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--base", default=SHARED_BASE if os.path.exists(SHARED_BASE) else OWN_BASE)
    args = parser.parse_args()
    from distributed import Client, LocalCluster

    compile_sources()
    with tempfile.TemporaryDirectory() as scratch:
        folder = os.path.join(scratch, "ranks")
        os.makedirs(folder)
        began = time.perf_counter()
        make_ranks(folder, args.ranks, args.base)
        print(f"{args.ranks} ranks of {os.path.basename(args.base)} written in {time.perf_counter() - began:.0f} s")
        alone = subprocess.run([sys.executable, "-c", ONE_RANK.format(root=ROOT, path=os.path.join(folder, "rank001.json.gz"))],
                               capture_output=True, text=True, check=True)
        print(f"one rank's summary parsed alone: {int(alone.stdout) / 1024:.0f} MB peak")
        seconds, peak, local = analyze(folder, os.path.join(scratch, "local"), None)
        print(f"{'run':22} {'wall':>7} {'advisor MB':>10} {'worker MB':>10}  same report")
        print(f"{'local process pool':22} {seconds:6.1f}s {peak:10.0f} {'':>10}  -")
        for workers in (int(n) for n in args.workers.split(",")):
            with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
                seconds, peak, report = analyze(folder, os.path.join(scratch, f"dask{workers}"), cluster.scheduler_address)
                with Client(cluster.scheduler_address, set_as_default=False) as client:
                    worker_mb = client.run(peak_mb)
            print(f"{f'dask, {workers} worker(s)':22} {seconds:6.1f}s {peak:10.0f} {max(worker_mb.values()):10.0f}  "
                  f"{'yes' if report == local else 'NO'}")


if __name__ == "__main__":
    main()
