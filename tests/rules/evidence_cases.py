"""A rule replayed over the saved evidence of every bundled sample (``tests/data/evidence``, recorded by real audits:
``tests/record_evidence.py``): it fires on each sample whose source says ``# expect: <slug>`` (at the lines marked,
on the CPU the evidence was recorded on; ``# expect on cuda:`` on the same evidence as if from a GPU), and on no
other. Each rule's test file makes its two tests with ``replayed(slug)``; its own cases follow them there."""

from __future__ import annotations

import functools
from typing import Callable

import pytest

from advisor.rulekit.engine import RuleSet, load_rules, run_rules
from conftest import ALL_SAMPLES, SAMPLES
from devkit.saved_evidence import annotated_samples, as_cuda, saved_evidence

EXPECTED = annotated_samples()


@functools.cache
def _alone(slug: str) -> RuleSet:
    rule = load_rules().get(slug)
    assert rule is not None, f"no built-in rule {slug}"
    return RuleSet(rules=[rule])


def findings_of(slug: str, evidence) -> list:
    """The rule's findings over ``evidence``, as the engine makes them (it runs each rule on its own)."""
    found, problems = run_rules(_alone(slug), evidence)
    assert problems == [], problems
    return found


def replayed(slug: str) -> tuple[Callable[[], None], Callable[[], None]]:
    """(its positive cases, its negative cases) as two tests."""
    @ALL_SAMPLES
    def test_fires_where_the_samples_expect_it_at_their_lines():
        cases = 0
        for sample, expect in sorted(EXPECTED.items()):
            evidence = saved_evidence(sample)
            if slug in expect.fires_for(evidence):
                cases += 1
                found = findings_of(slug, evidence)
                assert found, f"{slug} is silent on {sample}"
                path = str(SAMPLES / f"{sample}.py")
                lines = {loc.line for f in found for loc in f.locations if loc.file == path}
                assert expect.lines.get(slug, set()) <= lines, f"{sample}: expected at {expect.lines[slug]}, at {lines}"
            if slug in expect.on_cuda:
                cases += 1
                assert findings_of(slug, as_cuda(evidence)), f"{slug} is silent on {sample} replayed on a GPU"
        if not cases:
            pytest.skip(f"no bundled sample's evidence fires {slug} here: its positive cases are its file's own")

    @ALL_SAMPLES
    def test_is_silent_on_every_sample_that_does_not_expect_it():
        for sample, expect in sorted(EXPECTED.items()):
            evidence = saved_evidence(sample)
            if slug not in expect.fires_for(evidence):
                assert findings_of(slug, evidence) == [], f"{slug} fires on {sample}, which does not expect it"

    return test_fires_where_the_samples_expect_it_at_their_lines, test_is_silent_on_every_sample_that_does_not_expect_it
