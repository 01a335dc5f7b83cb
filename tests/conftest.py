"""Shared helpers: write model files, run real audits (cached per session), find fixtures."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from advisor.pipeline import AuditOptions, AuditResult, run_audit

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
SHARED_TRACES = ROOT.parent / "shared" / "traces" / "hta"


# A model whose class name, source line and output carry markup: reports must keep it text.
HOSTILE_MODEL = """
    import torch
    def _forward(self, x):
        y = self.lin(x)
        if y.sum() > 0:  # <img src=x onerror=alert(1)>
            print("<script>alert('stdout')</script>")
        return y
    Hostile = type("<script>alert('class')</script>", (torch.nn.Module,), {"forward": _forward})
    def get_model():
        model = Hostile()
        model.lin = torch.nn.Linear(2, 2)
        return model
    def get_inputs(): return torch.ones(1, 2)
"""


def write_model(directory: Path, source: str, name: str = "model.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def audit(path: Path, out_dir: Path, **options) -> AuditResult:
    """A real audit; fix verification only where a test asks for it (it costs its budget)."""
    options.setdefault("timeout", 120)
    options.setdefault("verify", False)
    return run_audit(AuditOptions(model_file=str(path), out_dir=str(out_dir), **options))


@pytest.fixture(scope="session")
def sample_audit(tmp_path_factory):
    """Audit a bundled sample once per test session: ``sample_audit("host_sync")``."""
    cache: dict[str, AuditResult] = {}
    out_dir = tmp_path_factory.mktemp("sample-reports")

    def run(name: str) -> AuditResult:
        if name not in cache:
            cache[name] = audit(SAMPLES / f"{name}.py", out_dir)
        return cache[name]

    return run


def line_of(path: Path, marker: str) -> int:
    """The 1-based line number of the first line containing ``marker``."""
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if marker in text:
            return number
    raise AssertionError(f"{marker!r} not in {path}")


def shared_trace(relative: str) -> Path:
    path = SHARED_TRACES / relative
    if not path.exists():
        pytest.skip(f"shared trace fixture {relative} is not present (../shared/traces/hta)")
    return path


os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
