"""The model-file protocol: what loads, and the clear errors for what does not."""

from __future__ import annotations

import pytest
import torch

from advisor.errors import AuditError
from advisor.workload.target import Target, call_model, load_target
from conftest import audit, line_of, write_model


def _load_error(tmp_path, source: str) -> AuditError:
    path = write_model(tmp_path, source)
    with pytest.raises(AuditError) as raised:
        load_target(str(path))
    return raised.value


@pytest.mark.slow
def test_tensor_tuple_and_dict_inputs_are_called_as_the_protocol_says(tmp_path):
    path = write_model(tmp_path, """
        import torch
        class Echo(torch.nn.Module):
            def forward(self, a, b=None, *, scale=1.0):
                return (a, b, scale)
        def get_model(): return Echo()
        def get_inputs(): return torch.ones(1)
    """)
    target = load_target(str(path))
    assert call_model(target.model, torch.ones(1))[1] is None
    assert call_model(target.model, (torch.ones(1), torch.zeros(1)))[1].item() == 0
    assert call_model(target.model, {"a": torch.ones(1), "scale": 3.0})[2] == 3.0


@pytest.mark.slow
def test_mode_follows_get_optimizer_and_can_be_overridden(tmp_path):
    path = write_model(tmp_path, """
        import torch
        def get_model(): return torch.nn.Linear(2, 2)
        def get_inputs(): return torch.ones(1, 2)
        def get_optimizer(model): return torch.optim.SGD(model.parameters(), lr=0.1)
    """)
    assert load_target(str(path)).mode == "train"
    assert load_target(str(path), mode="inference").mode == "inference"


@pytest.mark.slow
def test_fresh_copies_leave_the_users_model_and_inputs_alone(tmp_path):
    path = write_model(tmp_path, """
        import torch
        def get_model(): return torch.nn.Linear(2, 2)
        def get_inputs(): return torch.ones(1, 2)
    """)
    target: Target = load_target(str(path))
    model, feed, _ = target.fresh()
    with torch.no_grad():
        model.weight.add_(1.0)
        feed.inputs.add_(1.0)
    assert not torch.equal(model.weight, target.model.weight)
    assert torch.equal(target.inputs, torch.ones(1, 2))


def test_syntax_error_names_file_and_line(tmp_path):
    error = _load_error(tmp_path, """
        import torch
        def get_model(:
            pass
    """).error
    assert error.stage == "load" and error.kind == "user-code"
    assert error.file.endswith("model.py") and error.line == 2
    assert "SyntaxError" in error.message


def test_exception_on_import_points_at_the_raising_line(tmp_path):
    error = _load_error(tmp_path, """
        import torch
        CONFIG = {}
        WIDTH = CONFIG["width"]
        def get_model(): return torch.nn.Linear(2, 2)
    """).error
    assert error.line == 3 and "KeyError" in error.message and "importing the file" in error.message
    assert 'CONFIG["width"]' in error.code


def test_missing_protocol_functions_are_named(tmp_path):
    error = _load_error(tmp_path, "import torch\nmodel = torch.nn.Linear(2, 2)\n").error
    assert "get_model()" in error.message and "get_inputs()" in error.message
    error = _load_error(tmp_path, "import torch\ndef get_model(): return torch.nn.Linear(2, 2)\n").error
    assert "no get_inputs() and no get_dataloader()" in error.message


@pytest.mark.parametrize("body, expected", [
    ("def get_model(): return 'not a model'\ndef get_inputs(): return torch.ones(1)\n", "returned str, not a torch.nn.Module"),
    ("def get_model(): return torch.nn.Linear(1, 1)\ndef get_inputs(): return 3\n", "get_inputs() returned int"),
    ("def get_model(): return torch.nn.Linear(1, 1)\ndef get_inputs(): return {1: torch.ones(1)}\n", "keys are not all strings"),
    ("def get_model(): return torch.nn.Linear(1, 1)\ndef get_inputs(): return torch.ones(1)\nget_optimizer = 3\n",
     "get_optimizer is defined but is not a function"),
])
def test_protocol_violations_are_explained(tmp_path, body, expected):
    assert expected in _load_error(tmp_path, "import torch\n" + body).error.message


def test_exception_in_get_model_points_into_the_user_file(tmp_path):
    error = _load_error(tmp_path, """
        import torch
        def build(width):
            return torch.nn.Linear(width, -1)
        def get_model(): return build(4)
        def get_inputs(): return torch.ones(1, 4)
    """).error
    assert error.line == 3 and "get_model() raised" in error.message


@pytest.mark.slow
def test_failing_forward_is_reported_at_the_users_line_with_exit_code_2(tmp_path):
    path = write_model(tmp_path, """
        import torch
        class Broken(torch.nn.Module):
            def forward(self, x):
                y = x * 2
                return y @ torch.ones(3, 3)  # shapes do not match
        def get_model(): return Broken()
        def get_inputs(): return torch.ones(2, 2)
    """)
    result = audit(path, tmp_path / "out")
    assert result.exit_code("high") == 2
    [error] = [e for e in result.report.errors if e.stage == "timing"]
    assert error.kind == "user-code" and error.line == line_of(path, "shapes do not match")
    assert "RuntimeError" in error.message
    trace_stage = next(s for s in result.report.stages if s.stage == "trace")
    assert trace_stage.status == "skipped"  # the broken step is not run again
    assert result.report.environment is not None  # what was captured still reaches the report
