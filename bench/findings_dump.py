"""Run inside one revision's checkout (by ``bench/same_findings.py``): print, as JSON, every finding that
revision's rule engine gives on that revision's saved evidence of the samples, on the CPU as recorded and
replayed as an A100, and on the ranks of the saved DDP jobs.

    cd CHECKOUT && PYTHONPATH=CHECKOUT python PATH/TO/findings_dump.py
"""

from __future__ import annotations

import json
import os
import sys


def described(finding) -> dict:
    """What a user reads of a finding, with places by file name (two checkouts sit in two folders)."""
    return {
        "slug": finding.slug, "code": finding.code, "layer": str(finding.layer), "severity": str(finding.severity),
        "message": finding.message.replace(os.getcwd(), "{ROOT}"), "impact": finding.impact,
        "places": [[os.path.basename(place.file or ""), place.line] for place in finding.locations],
        "evidence": json.loads(json.dumps(finding.evidence, default=str).replace(os.getcwd(), "{ROOT}")),
        "fix": finding.fix.model_dump(mode="json") if finding.fix else None,
    }


def main() -> None:
    sys.path.insert(0, os.getcwd())  # the checkout's own saved evidence
    try:
        from devkit.saved_evidence import DDP_DIR, as_cuda, recorded_samples, saved_evidence
    except ImportError:  # a revision before devkit/: its fixtures sat among its tests
        sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
        from evidence_fixtures import DDP_DIR, recorded_samples, saved_evidence

        from conftest import as_cuda
    try:
        from advisor.rulekit.engine import RuleConfig
    except ImportError:  # the layout before the house by package
        from advisor.engine import RuleConfig

    rules = RuleConfig.load()
    found = {}
    cases = [(sample, None) for sample in recorded_samples()]
    cases += [(job, DDP_DIR) for job in ("ddp_train", "ddp_clean") if (DDP_DIR / f"{job}.evidence.json.gz").exists()]
    for name, folder in cases:
        evidence = saved_evidence(name) if folder is None else saved_evidence(name, folder)
        variants = {"cpu": evidence} if folder else {"cpu": evidence, "a100": as_cuda(evidence)}
        for device, replayed in variants.items():
            findings = [described(f) for f in rules.run(replayed)[0]]
            found[f"{name}/{device}"] = sorted(findings, key=lambda f: json.dumps(f, sort_keys=True))
    json.dump(found, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
