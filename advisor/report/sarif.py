"""The report as SARIF 2.1.0, for code-scanning tools: one result per finding (and per failed or warned
readiness check), at its locations."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from advisor.rulekit.rule import Finding
from advisor.rulekit.rule_page import rule_page_url

if TYPE_CHECKING:
    from advisor.report.schema import Report

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FINGERPRINT = "advisorFinding/v1"
_LEVELS = {"high": "error", "medium": "warning", "low": "note", "info": "note"}


def render_sarif(report: Report) -> str:
    rules, index = [], {}
    site = report.configuration.docs_url if report.configuration else ""
    for finding in report.findings:
        if finding.code not in index:
            index[finding.code] = len(rules)
            rules.append({
                "id": finding.code, "name": finding.slug,
                "shortDescription": {"text": finding.title},
                # the rule's own page where the docs site is known, else the page its fix cites
                "helpUri": rule_page_url(site, finding.slug)
                or (finding.fix.docs[0] if finding.fix and finding.fix.docs else None),
                "properties": {"layer": finding.layer.value},
            })
    results = [_result(finding, index[finding.code]) for finding in report.findings]
    if report.readiness is not None:  # the checks that failed or warned, as results of their own rules
        for check in report.readiness.checks:
            if check.status not in ("fail", "warn"):
                continue
            if check.id not in index:
                index[check.id] = len(rules)
                rules.append({"id": check.id, "name": check.id, "shortDescription": {"text": f"readiness: {check.id}"},
                              "properties": {"layer": "readiness"}})
            results.append(_check_result(check, index[check.id]))
    document = {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "advisor", "version": report.advisor_version or "0",
                                "rules": [_clean(r) for r in rules]}},
            "results": results,
            "invocations": [{"executionSuccessful": not report.errors,
                             "toolExecutionNotifications": [{"level": "error", "message": {"text": e.message}}
                                                            for e in report.errors]}],
        }],
    }
    return json.dumps(document, indent=2)


def _result(finding: Finding, rule_index: int) -> dict:
    result = {
        "ruleId": finding.code, "ruleIndex": rule_index,
        "level": _LEVELS.get(finding.severity.value if finding.severity else "info", "note"),
        "message": {"text": finding.message + (f" Fix: {finding.fix.summary}" if finding.fix else "")},
        "properties": {"slug": finding.slug, "impact": finding.impact,
                       "verification": finding.verification.status if finding.verification else None},
        # the finding's stable identity (rulekit/identity.py: its rule and the code at its places, not their line
        # numbers): code scanning follows the finding across commits by it
        "partialFingerprints": {FINGERPRINT: finding.id} if finding.id else None,
    }
    locations = [_location(loc.file, loc.line, loc.code) for loc in finding.locations if loc.file and loc.line > 0]
    if locations:
        result["locations"] = locations
    return _clean(result)


def _check_result(check, rule_index: int) -> dict:
    result = {"ruleId": check.id, "ruleIndex": rule_index, "level": "error" if check.status == "fail" else "warning",
              "message": {"text": check.message}, "properties": {"status": check.status}}
    locations = [_location(loc.file, loc.line, loc.code) for loc in check.locations if loc.file and loc.line > 0]
    if locations:
        result["locations"] = locations
    return result


def _location(file: str, line: int, code: str) -> dict:
    uri = os.path.relpath(file) if os.path.isabs(file) and not os.path.relpath(file).startswith("..") else file
    region = {"startLine": line}
    if code:
        region["snippet"] = {"text": code}
    return {"physicalLocation": {"artifactLocation": {"uri": uri.replace(os.sep, "/")}, "region": region}}


def _clean(value):
    """Drop None members: SARIF validators reject nulls where a type is required."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value
