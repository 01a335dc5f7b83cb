"""The same audit on a quiet machine and beside a busy-loop, side by side: what changed, and what advisor said.

Run by hand (not by the tests), on a machine with nothing else running. For each sample it runs
``advisor audit`` twice, alternating (quiet, busy, quiet, busy, ... ``--repeats`` times): quiet as the machine
is, then with one process spinning on one of the audit's CPUs (started outside advisor's process tree, as
another job is). It prints, per sample and run: the step time, the machine state advisor reported, the
other processes' cores, each finding with its severity and whether it was marked unreliable, each
fix's verdict, and the silent rules whose margins were marked. A rule that fired in one run and not the
other without a mark in the busy one would be a verdict flipped silently.

    python bench/contention.py [--samples kernel_storm,missing_amp] [--repeats 1] [--verify]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from devkit.contention import busy_loop  # noqa: E402


def audit(sample: str, out: str, verify: bool) -> dict:
    command = [sys.executable, "-m", "advisor", "audit", os.path.join(ROOT, "samples", f"{sample}.py"), "--out", out,
               "--format", "json", "--quiet"] + ([] if verify else ["--no-verify"])
    subprocess.run(command, cwd=ROOT, check=False, capture_output=True)
    with open(os.path.join(out, f"{sample}.json"), encoding="utf-8") as handle:
        return json.load(handle)


def show(label: str, report: dict) -> set[str]:
    quality, timing = report["quality"], report.get("timing") or {}
    others = (quality.get("timing") or {}).get("others_cores")
    print(f"  {label:5} step {timing.get('median_ms', float('nan')):8.3f} ms  {quality['state']:9} "
          f"others {others if others is not None else '-'} cores")
    fired = set()
    for finding in report["findings"]:
        fired.add(finding["slug"])
        verdict = finding.get("verification") or {}
        mark = " [unreliable here]" if finding.get("unreliable") else ""
        print(f"        {finding['severity']:6} {finding['slug']:24} {verdict.get('status', '')}"
              f"{' %.2fx' % verdict['speedup'] if verdict.get('speedup') else ''}{mark}")
    marked = [run["slug"] for run in report["rules"] if run.get("unreliable")]
    if marked:
        print(f"        silent, margins marked unreliable: {', '.join(marked)}")
    return fired


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="kernel_storm,missing_amp,non_contiguous")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--verify", action="store_true", help="also verify the fixes (slower)")
    options = parser.parse_args()
    cpu = min(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as scratch:
        for sample in options.samples.split(","):
            print(sample)
            for repeat in range(options.repeats):
                quiet = audit(sample, os.path.join(scratch, f"{sample}-q{repeat}"), options.verify)
                with busy_loop(cpu):
                    busy = audit(sample, os.path.join(scratch, f"{sample}-b{repeat}"), options.verify)
                quiet_fired, busy_fired = show("quiet", quiet), show("busy", busy)
                ratio = busy["timing"]["median_ms"] / quiet["timing"]["median_ms"] if quiet.get("timing") else 0
                silent_flips = [slug for slug in (quiet_fired ^ busy_fired) - {"shared-machine"}
                                if not any(f["slug"] == slug and f.get("unreliable") for f in busy["findings"])
                                and not any(r["slug"] == slug and r.get("unreliable") for r in busy["rules"])]
                print(f"  busy/quiet step time {ratio:.2f}x; verdicts flipped without a word: "
                      f"{', '.join(silent_flips) or 'none'}")


if __name__ == "__main__":
    main()
