"""The Python API: advisor.audit(model, inputs) in a notebook or script."""

from __future__ import annotations

import sys

import torch

import advisor
from conftest import SAMPLES


def test_audit_a_live_model_and_save_every_format(tmp_path):
    sys.path.insert(0, str(SAMPLES))
    import non_contiguous  # noqa: E402 - a bundled sample, used as a live object here

    model, inputs = non_contiguous.get_model(), non_contiguous.get_inputs()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    report = advisor.audit(model, inputs, budget=12)
    assert {f.slug for f in report.findings} == {"non-contiguous", "channels-last"}  # a ConvNeXt-style net in NCHW
    [finding] = [f for f in report.findings if f.slug == "non-contiguous"]
    assert finding.verification.status == "verified"
    assert report.timing is not None and report.trace is not None and report.errors == []
    assert "<!DOCTYPE html>" in report._repr_html_()
    for suffix in ("html", "json", "md", "sarif"):
        assert (tmp_path / f"r.{suffix}").name in report.save(str(tmp_path / f"r.{suffix}"))
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    assert not model.training and next(model.parameters()).is_contiguous()


def test_audit_trains_with_an_optimizer_and_rejects_non_modules():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    report = advisor.audit(model, torch.randn(4, 8), get_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.1),
                           verify=False)
    assert report.target.mode == "train" and report.target.optimizer == "SGD" and report.findings == []
    try:
        advisor.audit("not a model", torch.ones(1))
    except TypeError as error:
        assert "not a torch.nn.Module" in str(error)
    else:
        raise AssertionError("a non-module was accepted")
