"""``advisor fix`` over every sample with a source-fixable finding: each edit's re-audit verdict, and
whether the re-audit of the patched copy cleared the finding.

Run by hand (not by the tests): a live audit, a measurement per edit and a re-audit per sample, some
minutes in all. Which samples: those whose saved evidence (tests/data/evidence) gives a finding an edit,
as ``tests/test_patches.py`` plans them; each runs from a copy in a scratch folder, so the checkout is
only read. On a busy machine many verdicts are "inconclusive": that is the measurement knowing its
quality, not a failure; "cleared" depends on the source alone for the rules that judge code, and on this
machine's timings for the share-gated ones (a data wait's share of the step).

    python bench/fix_samples.py [--samples zero_grad_in_place,kernel_storm] [--pairs 5] [--safe-only]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from whole_process import ROOT

sys.path.insert(0, ROOT)  # devkit: the saved evidence


def fixable_samples(unsafe: bool) -> list[str]:
    """The samples whose saved evidence plans at least one patched edit."""
    from advisor.patch.patch_plan import plan_patch
    from advisor.rulekit.engine import load_rules, run_rules
    from devkit.saved_evidence import recorded_samples, saved_evidence

    rules, chosen = load_rules(), []
    for sample in recorded_samples():
        evidence = saved_evidence(sample)
        findings, _ = run_rules(rules, evidence)
        plan = plan_patch(findings, rules, entry=evidence.target.model_file,
                          root=os.path.dirname(evidence.target.model_file), unsafe=unsafe)
        if plan.patched:
            chosen.append(sample)
    return chosen


def fix_one(sample: str, pairs: int, unsafe: bool) -> list[tuple[str, str, str, str]]:
    """(rule, status, verdict, cleared) for each of the sample's edits."""
    with tempfile.TemporaryDirectory() as scratch:
        shutil.copy(os.path.join(ROOT, "samples", f"{sample}.py"), scratch)
        command = [sys.executable, "-m", "advisor", "fix", f"{sample}.py", "--pairs", str(pairs), "--quiet",
                   *(["--unsafe-fixes"] if unsafe else [])]
        done = subprocess.run(command, cwd=scratch, capture_output=True, text=True, check=False)
        report_path = os.path.join(scratch, "reports", f"{sample}.fix.json")
        if done.returncode != 0 or not os.path.exists(report_path):
            return [("(the fix)", "failed", done.stderr.strip().splitlines()[-1][:90] if done.stderr else "", "")]
        with open(report_path, encoding="utf-8") as handle:
            report = json.load(handle)
    rows = []
    for finding in report["findings"]:
        edit = finding["edit"]
        if not edit:
            continue
        verification = edit["verification"] or {}
        verdict = verification.get("status", "")
        if verification.get("speedup") is not None:
            verdict += (f" {verification['speedup']:.2f}x "
                        f"[{verification['ci_low']:.2f}-{verification['ci_high']:.2f}]")
        cleared = {True: "cleared", False: "NOT cleared", None: ""}[edit["cleared"]]
        rows.append((finding["slug"], edit["status"], verdict or edit["reason"][:60], cleared))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="", help="comma-separated (default: every source-fixable sample)")
    parser.add_argument("--pairs", type=int, default=5, help="interleaved baseline/patched pairs per edit")
    parser.add_argument("--safe-only", action="store_true", help="without --unsafe-fixes")
    args = parser.parse_args()
    unsafe = not args.safe_only
    samples = [s for s in args.samples.split(",") if s] or fixable_samples(unsafe)
    print(f"{'sample':24} {'rule':28} {'edit':12} {'patched source':34} re-audit")
    patched = cleared = 0
    for sample in samples:
        for slug, status, verdict, gone in fix_one(sample, args.pairs, unsafe):
            print(f"{sample:24} {slug:28} {status:12} {verdict:34} {gone}", flush=True)
            patched += status == "patched"
            cleared += gone == "cleared"
    print(f"\n{patched} edits held in the patches, {cleared} of them cleared by the re-audit")


if __name__ == "__main__":
    main()
