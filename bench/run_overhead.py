"""What ``advisor run`` costs on top of the script: wall time of the script alone against the same
script under ``advisor run --full`` (no verification), whole processes, median of a few runs.

The issue's target is at most 1.5x plus a fixed start-up of a few seconds. Each script runs at
two lengths, so the two parts separate: the marginal ratio is the extra wall time of the longer
run over the shorter, under advisor against alone (what each further step costs once the window
is over), and the fixed part is what advisor adds to the shorter run beyond that ratio
(advisor's import, the warm-up, profiled and watched steps, describing the model, the reports).

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
SCRIPTS = [  # (script, arguments for the shorter run, for the longer run): several seconds apart alone
    ("chain_train.py", ["--steps", "500"], ["--steps", "2500"]),
    ("train_loop.py", ["--epochs", "1"], ["--epochs", "32"]),  # an epoch is ~0.2 s: 4 left them 0.6 s apart
    ("infer_loop.py", ["--batches", "400"], ["--batches", "2400"]),
]


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
    parser.add_argument("--scripts", default=",".join(name for name, _, _ in SCRIPTS))
    args = parser.parse_args()
    print(f"{'script':<16} {'alone':>15} {'advisor run':>15} {'marginal ratio':>15} {'fixed':>8}")
    for name, short, long in (entry for entry in SCRIPTS if entry[0] in args.scripts.split(",")):
        path = os.path.join(ROOT, "samples", "scripts", name)
        alone = [wall([sys.executable, path, *extra], args.repeats) for extra in (short, long)]
        with tempfile.TemporaryDirectory() as out:
            audited = [_audited([sys.executable, path, *extra], out, args.repeats) for extra in (short, long)]
        ratio = (audited[1] - audited[0]) / (alone[1] - alone[0])
        fixed = audited[0] - ratio * alone[0]
        print(f"{name:<16} {alone[0]:>6.2f}/{alone[1]:>6.2f}s {audited[0]:>6.2f}/{audited[1]:>6.2f}s "
              f"{ratio:>15.2f} {fixed:>7.2f}s")


def _audited(script: list[str], out: str, repeats: int) -> float:
    """Like wall(), without check: exit code 1 (a finding at --fail-on) is a normal outcome."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-m", "advisor", "run", "--full", "--no-verify", "--quiet", "--out", out, "--", *script],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


if __name__ == "__main__":
    main()
