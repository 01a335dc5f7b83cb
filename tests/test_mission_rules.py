"""Live audits of the bundled samples, every rule at once: each decided as its own measurement says. Each rule's own
cases are in tests/rules/."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import EXPECTED

from conftest import SAMPLES


@pytest.mark.slow
@pytest.mark.parametrize("sample", sorted(EXPECTED))
def test_a_live_audit_decides_each_rule_as_its_own_measurement_says(sample_audit, sample):
    """What a live audit can always be held to, on any machine, quiet or loaded: the evidence is gathered; a
    rule decided without a measured share (a structural finding) fires exactly as the sample expects; a
    rule that judges a measured share either fires at the sample's lines or reports the margin it stayed
    silent by; and a finding the sample does not expect is one decided on a measured margin. The exact
    verdicts of the recorded run are the fast tier's (tests/rules/, evidence_cases.py)."""
    result = sample_audit(sample)
    report = result.report
    assert report.errors == [], report.errors
    runs = {run.slug: run for run in report.rules}
    fired = {f.slug for f in report.findings}
    expected = EXPECTED[sample].fires_for(result.evidence)  # this machine's PyTorch and CPU
    expect = EXPECTED[sample]
    for slug in expected:
        run = runs[slug]
        assert run.status != "not run", f"{sample}/{slug} was not run: {run.why}"
        assert run.status == "fired" or run.margin is not None, f"{sample}/{slug}: silent without a measurement"
    for slug in fired - expected:
        assert runs[slug].margin is not None, f"{sample}: {slug} fired, unexpected and not on a measured margin"
    path = SAMPLES / f"{sample}.py"
    for slug, lines in expect.lines.items():
        if slug in fired:
            found = {loc.line for f in report.findings if f.slug == slug for loc in f.locations if loc.file == str(path)}
            assert lines <= found, f"{sample}/{slug}: expected at lines {sorted(lines)}, found at {sorted(found)}"
