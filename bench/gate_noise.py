"""Does the CI gate catch what it claims on this machine? Run by hand on the machine the gate runs on.

Runs the gate recipe as CI runs it (``examples/ci_gate.sh``: both revisions audited and their reports diffed for
findings, the step timed by ``advisor diff --remeasure`` in interleaved pairs) TRIES times on an unchanged copy of
``samples/gpt_block.py`` and TRIES times on a copy with batches 25% larger, alternating, so a drift of the machine
falls on both. An unchanged copy must pass (exit 0, no finding added or resolved, no step claimed slower); the
larger batch must fail (exit 1, the step a REGRESSION). Prints each try's exit code, remeasured step change and
findings diff, and the tally. Exit 1 when a try went the wrong way.

    python bench/gate_noise.py [--tries 5] [--growth 1.25] [--pairs 20]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "samples", "gpt_block.py")
GATE = os.path.join(ROOT, "examples", "ci_gate.sh")
BATCH = "(8, 128)"  # get_inputs' shape in the sample


def gate(baseline: str, pr: str, out: str, pairs: int) -> tuple[int, str, str]:
    """The recipe's exit code, its remeasured step line and its findings' diff in a few words."""
    environment = {**os.environ, "ADVISOR_GATE_PAIRS": str(pairs),
                   "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    done = subprocess.run(["sh", GATE, baseline, pr, out], capture_output=True, text=True, env=environment)
    step = re.search(r"remeasured step time:.*", done.stdout)
    added, resolved = (re.search(rf"^{title}: (\d+)((?:\n  .*)*)", done.stdout, re.M) for title in ("added", "resolved"))
    findings = (f"added {added.group(1)}, resolved {resolved.group(1)}" if added and resolved
                else "no findings diff: " + (done.stderr.strip().splitlines() or ["?"])[-1])
    which = [line.split(":")[0].strip() for match in (added, resolved) if match for line in match.group(2).splitlines()
             if line.strip()]
    findings += f" ({', '.join(which)})" if which else ""
    return done.returncode, step.group(0) if step else "no remeasured step", findings


def copy(source: str, folder: str, batch: str) -> str:
    os.makedirs(folder)
    path = os.path.join(folder, "gpt_block.py")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(source.replace(BATCH, batch))
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--growth", type=float, default=1.25, help="the larger batch over the sample's")
    parser.add_argument("--pairs", type=int, default=20, help="the recipe's ADVISOR_GATE_PAIRS")
    args = parser.parse_args()
    if shutil.which("advisor", path=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]) is None:
        sys.exit("bench: advisor is not installed beside this Python (the recipe calls the command)")
    scratch = tempfile.mkdtemp(prefix="gate_noise_")
    with open(SAMPLE, encoding="utf-8") as handle:
        source = handle.read()
    assert BATCH in source, f"{SAMPLE}: its batch is no longer {BATCH}"
    larger_batch = f"({round(8 * args.growth)}, 128)"
    wrong = {"unchanged": 0, "larger": 0}
    for attempt in range(args.tries):
        for kind, batch in (("unchanged", BATCH), ("larger", larger_batch)):
            pr = copy(source, os.path.join(scratch, f"{kind}{attempt}"), batch)
            code, step, findings = gate(SAMPLE, pr, os.path.join(scratch, f"{kind}{attempt}-out"), args.pairs)
            expected = 0 if kind == "unchanged" else 1
            clean = findings.startswith("added 0, resolved 0") or kind == "larger"
            wrong[kind] += code != expected or not clean
            print(f"{kind:>9} #{attempt + 1}: exit {code} ({'as expected' if code == expected and clean else 'WRONG'}); "
                  f"{step}; findings {findings}", flush=True)
    for kind, expected in (("unchanged", "pass"), ("larger", f"fail (batch {larger_batch})")):
        print(f"{kind}: {args.tries - wrong[kind]} of {args.tries} {expected}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 1 if any(wrong.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
