"""What ``advisor run``'s verification decides on real scripts: every measured fix's verdict, how it was measured
(inside one run of the script, by blocks of steps, or in whole runs), its pairs, its power, and the share of
measured fixes that ended inconclusive. By hand, on a quiet machine; never part of the test suite.

Runs ``advisor run`` with verification at the default budget on this repository's sample scripts (each as its
docstring says to run it), and reads the JSON reports of any further folders given (``bench/corpus.py --verify
--reports DIR`` leaves the corpus's there):

    python bench/script_verdicts.py [--only 'chain*,gpt*'] [--no-samples] [REPORT_DIR ...]
"""

from __future__ import annotations

import argparse
import fnmatch
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(ROOT, "samples", "scripts")
# the sample scripts a single process runs as they are (the DDP ones need torchrun: given here with it)
SAMPLE_COMMANDS = {
    "chain_train.py": [sys.executable, "chain_train.py"],
    "clean_train.py": [sys.executable, "clean_train.py"],
    "eval_every_epoch.py": [sys.executable, "eval_every_epoch.py"],
    "gan_train.py": [sys.executable, "gan_train.py"],
    "infer_loop.py": [sys.executable, "infer_loop.py"],
    "lbfgs_sequence.py": [sys.executable, "lbfgs_sequence.py"],
    "manual_sgd_lm.py": [sys.executable, "manual_sgd_lm.py"],
    "reinforce_episodes.py": [sys.executable, "reinforce_episodes.py"],
    "train_loop.py": [sys.executable, "train_loop.py"],
    "trainer_callbacks.py": [sys.executable, "trainer_callbacks.py"],
    "ddp_train.py": ["torchrun", "--nproc-per-node", "2", "ddp_train.py"],
}


def run_samples(only: str, out: str) -> list[str]:
    reports = []
    for name, command in SAMPLE_COMMANDS.items():
        if not any(fnmatch.fnmatch(name, pattern) for pattern in only.split(",")):
            continue
        if command[0] == "torchrun" and shutil.which("torchrun") is None:
            print(f"{name}: skipped (no torchrun)")
            continue
        folder = os.path.join(out, os.path.splitext(name)[0])
        done = subprocess.run([sys.executable, "-m", "advisor", "run", "--quiet", "--format", "json", "--out", folder,
                               "--", *command], cwd=SCRIPTS, capture_output=True, text=True)
        found = glob.glob(os.path.join(folder, "*.json"))
        if not found:
            print(f"{name}: no report (exit {done.returncode}): {done.stderr.strip()[-300:]}")
        reports += found
    return reports


def verdict_rows(path: str) -> list[tuple[str, str, dict]]:
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    name = os.path.basename(path)
    return [(name, finding["slug"], finding["verification"]) for finding in report["findings"]
            if (finding.get("verification") or {}).get("speedup") is not None]


def how(verification: dict) -> str:
    if verification.get("timed") == "block":
        return "in one run"
    return "whole runs" if str(verification.get("timed", "")).startswith("run") else verification.get("timed", "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", help="folders of JSON reports to read as well (searched recursively)")
    parser.add_argument("--only", default="*", help="comma-separated glob patterns of sample script names")
    parser.add_argument("--no-samples", action="store_true", help="read the folders only")
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="advisor-script-verdicts-")
    reports = [] if args.no_samples else run_samples(args.only, out)
    for folder in args.folders:
        reports += glob.glob(os.path.join(folder, "**", "*.json"), recursive=True)
    rows = [row for path in reports for row in verdict_rows(path)]
    print(f"{'report':28} {'fix':28} {'verdict':13} {'speedup':>8} {'95% interval':>14} {'n':>4} "
          f"{'how':10} {'resolves':>8}")
    for name, slug, v in rows:
        interval = f"[{v['ci_low']:.2f}-{v['ci_high']:.2f}]"
        resolves = f"{v['resolves']:.2f}x" if v.get("resolves") else "-"
        print(f"{name[:28]:28} {slug[:28]:28} {v['status']:13} {v['speedup']:>7.2f}x {interval:>14} "
              f"{v['samples']:>4} {how(v):10} {resolves:>8}")
    inconclusive = sum(1 for _, _, v in rows if v["status"] == "inconclusive")
    if rows:
        print(f"\n{len(rows)} measured fixes, {inconclusive} inconclusive ({inconclusive / len(rows):.0%}); "
              f"{sum(1 for _, _, v in rows if how(v) == 'in one run')} measured inside one run of the script")
    shutil.rmtree(out, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
