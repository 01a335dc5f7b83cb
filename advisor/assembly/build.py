"""One place that turns gathered evidence into a Report, for every entry point.

``advisor audit`` (a model file in the supervised child), ``advisor run`` (a script), ``advisor.audit(...)``
(a live model in this process), ``advisor ready`` and ``advisor analyze`` (recorded traces) differ only in
how they gather evidence. After that they share this: the configured rules run once over the evidence
and the report is filled from it; the fixes' verdicts are then folded in by the one verification method
(``verification.py``).
"""

from __future__ import annotations

import os

from advisor.assembly.quality import mark_unreliable, measurement_quality
from advisor.assembly.summarize import summarize_graph, summarize_performance, summarize_roofline, summarize_trace
from advisor.assembly.suppression import suppress, unused
from advisor.gathered import Gathered
from advisor.report.schema import ConfigurationRecord, Report, RuleProblemRecord, VerificationSettings
from advisor.rulekit.engine import RuleConfig
from advisor.rulekit.rule import Layer
from advisor.rulekit.rule_page import docs_site
from advisor.version import __version__

# Failures of these kinds leave the audit incomplete (exit 2); "unsupported" ones are noted only.
FAILING_KINDS = ("user-code", "timeout", "crash", "internal", "interrupted")


def assemble_report(gathered: Gathered, rules: RuleConfig, verification: VerificationSettings | None = None) -> Report:
    """The report of one run: findings from the configured rules, summaries of the evidence (only the
    errors when there is nothing to judge)."""
    evidence, errors, stages, output = gathered.evidence, gathered.errors, gathered.stages, gathered.output
    run_rules = gathered.judge
    report = Report(
        advisor_version=__version__, target=evidence.target, errors=list(errors), stages=list(stages),
        output=output, verification=verification or VerificationSettings(),
        rule_problems=[RuleProblemRecord(source=p.source, message=p.message) for p in rules.ruleset.problems],
        environment=evidence.env, timing=evidence.timing, data=evidence.data, flops=evidence.flops,
        ranks=evidence.rank_summaries, memory=evidence.memory,
    )
    report.configuration = ConfigurationRecord(file=rules.config_file, turned_off=sorted(rules.configured_off),
                                               docs_url=docs_site(rules.docs_url))
    if run_rules:
        findings, problems = rules.run(evidence, report.rules)
        root = os.path.dirname(rules.config_file) if rules.config_file else ""
        report.findings, report.suppressed = suppress(findings, rules.per_file_ignores, root)
        places = [evidence.target.model_file] + [loc.file for f in findings for loc in f.locations]
        report.unused_noqa = unused(places, report.suppressed, rules.ruleset.rules)
        report.rule_problems += [RuleProblemRecord(source=p.source, message=p.message) for p in problems]
    report.quality = measurement_quality(evidence)
    mark_unreliable(report, rules.ruleset.slugs_of(Layer.HARDWARE))
    report.performance = summarize_performance(evidence)
    report.roofs = evidence.peaks
    if evidence.trace is not None:
        report.trace = summarize_trace(evidence.trace)
        report.roofline = summarize_roofline(evidence)
    if evidence.graph is not None:
        report.graph = summarize_graph(evidence.graph)
    return report


def failed(report: Report) -> bool:
    """Whether the run itself failed (exit 2): a stage error of a failing kind."""
    return any(error.kind in FAILING_KINDS for error in report.errors)
