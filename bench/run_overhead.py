"""What ``advisor run`` costs on top of the script: wall time of the script alone against the same
script under ``advisor run --full`` (no verification), whole processes, median of a few runs.

The issue's target is at most 1.5x plus a fixed start-up of a few seconds; the table prints the
ratio and the difference in seconds (the start-up: advisor's import, the profiled and watched
steps, writing the reports).

    python bench/run_overhead.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = [("clean_train.py", []), ("train_loop.py", ["--epochs", "1"]), ("infer_loop.py", ["--batches", "400"])]


def wall(command: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{'script':<16} {'alone':>8} {'advisor run':>12} {'ratio':>7} {'extra':>8}")
    for name, extra in SCRIPTS:
        script = [sys.executable, os.path.join(ROOT, "samples", "scripts", name), *extra]
        alone = wall(script, args.repeats)
        with tempfile.TemporaryDirectory() as out:
            audited = _audited(script, out, args.repeats)
        print(f"{name:<16} {alone:>7.2f}s {audited:>11.2f}s {audited / alone:>7.2f} {audited - alone:>7.2f}s")


def _audited(script: list[str], out: str, repeats: int) -> float:
    """Like wall(), without check: exit code 1 (a finding at --fail-on) is a normal outcome."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "advisor", "run", "--full", "--quiet", "--out", out, "--", *script],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


if __name__ == "__main__":
    main()
