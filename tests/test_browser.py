"""The HTML report in a real headless Chromium: renders, no errors, no network, state survives reload."""

from __future__ import annotations

import struct
import zlib

import pytest
from browser import Browser, chromium_path

import advisor
from conftest import HOSTILE_MODEL, audit, write_model

pytestmark = pytest.mark.skipif(chromium_path() is None, reason="no chromium here (.ci/run installs it)")


@pytest.fixture(scope="module")
def browser():
    session = Browser()
    yield session
    session.close()


@pytest.fixture(scope="module")
def report_page(sample_audit, tmp_path_factory):
    result = sample_audit("host_sync")
    path = tmp_path_factory.mktemp("page") / "host_sync.html"
    advisor.save(result.report, str(path))
    return path


@pytest.mark.slow
def test_the_report_renders_offline_without_errors(browser, report_page, sample_audit):
    browser.open(report_page.as_uri())
    findings = len(sample_audit("host_sync").report.findings)  # host-sync, and graph-breaks on .item()
    assert findings >= 2 and browser.evaluate("document.querySelectorAll('section.finding').length") == findings
    assert browser.evaluate("document.querySelectorAll('svg.chart').length") >= 2
    assert browser.console_errors() == []
    remote = [url for url in browser.requested_urls() if not url.startswith(("file:", "data:"))]
    assert remote == []


@pytest.mark.slow
def test_a_checked_box_survives_a_reload(browser, report_page):
    browser.open(report_page.as_uri())
    assert browser.evaluate("document.querySelector('input[data-finding]').checked") is False
    browser.evaluate("document.querySelector('input[data-finding]').click()")
    assert browser.reload_until("document.querySelector('input[data-finding]').checked", True)
    browser.evaluate("document.querySelector('input[data-finding]').click()")  # leave the profile clean
    assert browser.reload_until("document.querySelector('input[data-finding]').checked", False)


@pytest.mark.slow
def test_hostile_names_stay_text_in_the_browser(browser, tmp_path):
    path = write_model(tmp_path, HOSTILE_MODEL)
    page = tmp_path / "hostile.html"
    advisor.save(audit(path, tmp_path / "out").report, str(page))
    browser.open(page.as_uri())
    assert browser.evaluate("document.querySelectorAll('script').length") == 1  # ours only
    assert browser.evaluate("document.querySelectorAll('img').length") == 0
    assert browser.evaluate("document.body.innerText.includes(\"<script>alert('class')</script>\")") is True
    assert browser.evaluate("document.body.innerText.includes('<img src=x onerror=alert(1)>')") is True


@pytest.mark.slow
def test_screenshot_is_not_blank(browser, report_page):
    browser.open(report_page.as_uri())
    colours = _distinct_colours(browser.screenshot())
    assert colours > 50, f"the page looks blank or broken ({colours} distinct colours)"
    blank = report_page.with_name("blank.html")
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    browser.open(blank.as_uri())
    assert _distinct_colours(browser.screenshot()) < 5  # the check itself tells a blank page apart


def _distinct_colours(png: bytes) -> int:
    """Distinct RGB(A) pixel values of a PNG, sampled (a blank page has one or two)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    offset, chunks, width, height, channels = 8, [], 0, 0, 4
    while offset < len(png):
        length, kind = struct.unpack(">I4s", png[offset:offset + 8])
        data = png[offset + 8:offset + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", data[:10])
            channels = {2: 3, 6: 4}.get(colour, 4)
        elif kind == b"IDAT":
            chunks.append(data)
        offset += 12 + length
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels + 1
    colours = set()
    for row in range(0, height, max(1, height // 200)):
        line = raw[row * stride + 1:(row + 1) * stride]  # unfiltering skipped: distinct bytes still differ
        for x in range(0, len(line) - channels, channels * max(1, width // 200)):
            colours.add(line[x:x + channels])
    return len(colours)


@pytest.mark.slow
def test_the_readiness_report_renders_its_checklist_and_chart_offline(browser, tmp_path):
    from advisor.commands.ready import ReadyRunOptions, run_ready
    from advisor.ready.checks import ReadyOptions
    from conftest import SAMPLES

    options = ReadyRunOptions(model_file=str(SAMPLES / "ready" / "size_branch.py"), out_dir=str(tmp_path),
                              seconds_per_size=0.3, checks=ReadyOptions(latency_budget_ms=50.0))
    page = tmp_path / "size_branch.html"
    advisor.save(run_ready(options).report, str(page))
    browser.open(page.as_uri())
    assert browser.evaluate("document.querySelectorAll('section.check').length") == 10
    assert browser.evaluate("document.querySelectorAll('section.check.fail').length") == 1  # recompiles
    assert browser.evaluate("document.querySelectorAll('#latency-chart circle.p99').length") == 3
    assert browser.evaluate("document.querySelectorAll('#latency-chart #budget').length") == 1
    assert browser.evaluate("document.querySelector('#count-fail').textContent") == "1"
    assert browser.console_errors() == []
    assert [url for url in browser.requested_urls() if not url.startswith(("file:", "data:"))] == []
    assert _distinct_colours(browser.screenshot()) > 50


@pytest.mark.slow
def test_the_roofline_chart_draws_each_operator_under_the_machines_roofs(browser, tmp_path):
    from advisor.assembly.build import assemble_report
    from advisor.gathered import Gathered
    from advisor.rulekit.engine import RuleConfig
    from devkit.saved_evidence import saved_evidence

    report = assemble_report(Gathered(evidence=saved_evidence("gpt_block")), RuleConfig.load())
    page = tmp_path / "gpt_block.html"
    advisor.save(report, str(page))
    browser.open(page.as_uri())
    plotted = sum(1 for rate in report.roofline.operators if rate.intensity)
    assert browser.evaluate("document.querySelectorAll('svg.roofline circle.operator').length") == plotted
    assert browser.evaluate("document.querySelectorAll('svg.roofline polyline.roof').length") == len(report.roofline.peaks.flops_per_s)
    # every operator lies inside the plot, and its tooltip names it
    inside = ("[...document.querySelectorAll('svg.roofline circle.operator')].every(c => {const b = c.getBBox(); "
              "const frame = document.querySelector('svg.roofline rect').getBBox(); return b.x >= frame.x - 12 && "
              "b.x + b.width <= frame.x + frame.width + 12 && b.y >= frame.y - 12 && b.y + b.height <= frame.y + frame.height + 12;})")
    assert browser.evaluate(inside) is True
    assert "aten::" in browser.evaluate("document.querySelector('svg.roofline circle.operator title').textContent")
    assert browser.evaluate("document.querySelectorAll('#operators tr').length") == len(report.roofline.operators) + 1
    assert browser.evaluate("document.querySelectorAll('#memory-kinds tr').length") == len(report.memory.kinds) + 1
    assert browser.console_errors() == []
