"""What step-time change can `advisor diff` resolve on this machine? Run by hand on the machine the gate runs on.

Audits `samples/gpt_block.py` (``--no-verify``, JSON only) 2*PAIRS times and a copy of it with batches 25% larger
PAIRS times, interleaved (same, same, larger, ...) so a drift of the machine falls on both. Then diffs each pair of
identical audits in both directions (a gate that holds: exit 0, no speed claim, no finding added or resolved), and
the first audit of each pair against the larger batch (a gate that catches: REGRESSION, exit 1). Prints each
diff's verdict and interval, and the widest interval of the identical pairs: the change the gate can resolve here.
Exit 1 when an identical pair fails the gate or a larger batch is missed on a machine measured quiet.

    python bench/gate_noise.py [--pairs 3] [--growth 1.25]
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "samples", "gpt_block.py")
BATCH = "(8, 128)"  # get_inputs' shape in the sample


def audit(model_file: str, out_dir: str) -> str:
    subprocess.run([sys.executable, "-m", "advisor", "audit", model_file, "--no-verify", "--format", "json",
                    "--out", out_dir, "--quiet"], check=False, capture_output=True)
    found = glob.glob(os.path.join(out_dir, "*.json"))
    if not found:
        sys.exit(f"bench: the audit of {model_file} wrote no report in {out_dir}")
    return found[0]


def diff(old: str, new: str) -> tuple:
    from advisor.commands.diff import DiffOptions, run_diff

    result = run_diff(DiffOptions(old_report=old, new_report=new))
    step = result.diff.step
    said = "no step" if step is None else (f"{step.ratio - 1:+.1%} [{step.ci_low - 1:+.1%}, {step.ci_high - 1:+.1%}] "
                                           f"{step.verdict if step.judged else 'not judged'} "
                                           f"(run-to-run ±{step.noise:.1%})")
    changed = len(result.diff.added) + len(result.diff.resolved)
    return result.exit_code, f"exit {result.exit_code}; {said}; findings added/resolved: {changed}", step, changed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--growth", type=float, default=1.25, help="the larger batch over the sample's")
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="gate_noise_")
    larger = os.path.join(scratch, "gpt_block.py")
    with open(SAMPLE, encoding="utf-8") as handle:
        source = handle.read()
    assert BATCH in source, f"{SAMPLE}: its batch is no longer {BATCH}"
    with open(larger, "w", encoding="utf-8") as handle:
        handle.write(source.replace(BATCH, f"({round(8 * args.growth)}, 128)"))
    same, grown = [], []
    for pair in range(args.pairs):
        same.append((audit(SAMPLE, os.path.join(scratch, f"a{pair}")), audit(SAMPLE, os.path.join(scratch, f"b{pair}"))))
        grown.append(audit(larger, os.path.join(scratch, f"g{pair}")))
    failures, widest = 0, 0.0
    print(f"identical audits of {os.path.relpath(SAMPLE, ROOT)}, both directions:")
    for first, second in same:
        for old, new in ((first, second), (second, first)):
            code, line, step, changed = diff(old, new)
            print("  " + line)
            failures += code != 0 or changed > 0 or (step is not None and step.verdict in ("slower", "faster"))
            if step is not None and step.judged:
                widest = max(widest, step.half_width)
    print(f"batches x{args.growth:g}:")
    for (first, _), bigger in zip(same, grown):
        code, line, step, _ = diff(first, bigger)
        print("  " + line)
        failures += code != 1 and (step is None or step.judged)  # a run on a contended machine is not judged
    print(f"widest interval between identical audits: ±{widest:.1%} (the smallest change this gate resolves here)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
