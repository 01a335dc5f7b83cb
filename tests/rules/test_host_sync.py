"""host-sync: positives at the right lines with counts, negatives silent."""

from __future__ import annotations

import pytest

from advisor.evidence import Evidence, TargetInfo
from advisor.rulekit.engine import load_rules, run_rules
from advisor.trace.parse import parse_trace
from conftest import SAMPLES, audit, line_of, shared_trace, write_model
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("host-sync")


def _host_sync(result):
    return [f for f in result.report.findings if f.slug == "host-sync"]


@pytest.mark.slow
def test_sample_item_and_boolean_mask_are_found_per_line_with_counts(sample_audit):
    [finding] = _host_sync(sample_audit("host_sync"))
    path = SAMPLES / "host_sync.py"
    by_line = {loc.line: loc for loc in finding.locations}
    item_line, mask_line = line_of(path, ".item() > 0.5"), line_of(path, "scores.squeeze(-1) > 0.3")
    assert set(by_line) == {item_line, mask_line}
    assert by_line[item_line].count_per_step == 4 and by_line[mask_line].count_per_step == 4  # 4 blocks
    assert "breaks the torch.compile graph" in by_line[item_line].note
    assert by_line[item_line].code.startswith("if scores.mean().item()")
    assert finding.evidence["syncs_per_step"] == 8 and finding.evidence["lines_in_loops"] == 2
    assert finding.severity.value == "low"  # a CPU run: LOW at most, its GPU cost said in the message
    assert "torch.where" in finding.fix.summary and "mask" in finding.fix.summary


@pytest.mark.slow
def test_tolist_numpy_and_bool_are_found_although_the_profiler_shows_no_op(tmp_path):
    path = write_model(tmp_path, """
        import torch
        class Logs(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(8, 8)
            def forward(self, x):
                y = self.lin(x)
                stats = y.mean(0).tolist()  # TOLIST
                peak = y.detach().numpy().max()  # NUMPY
                if y.sum():  # BOOL
                    y = y + 1
                return y
        def get_model(): return Logs()
        def get_inputs(): return torch.randn(4, 8)
    """)
    [finding] = _host_sync(audit(path, tmp_path / "out"))
    found = {loc.line: loc for loc in finding.locations}
    assert set(found) == {line_of(path, "TOLIST"), line_of(path, "NUMPY"), line_of(path, "BOOL")}
    assert ".tolist" in found[line_of(path, "TOLIST")].note
    assert ".__bool__" in found[line_of(path, "BOOL")].note


@pytest.mark.slow
def test_clean_model_has_no_host_sync(sample_audit):
    assert _host_sync(sample_audit("clean_mlp")) == []


@pytest.mark.slow
def test_pytorch_internal_sync_in_one_hot_is_not_blamed_on_the_user(tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch.nn import functional as F
        class Classifier(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(10, 10)
            def forward(self, labels):
                return self.lin(F.one_hot(labels, num_classes=10).float())
        def get_model(): return Classifier()
        def get_inputs(): return torch.randint(0, 10, (16,))
    """)
    result = audit(path, tmp_path / "out")
    internal = [o for o in result.evidence.trace.step_ops() if o.name == "aten::item"]
    assert internal, "one_hot on CPU does sync internally; the test needs that"
    assert _host_sync(result) == []


@pytest.mark.slow
def test_a_sync_inside_an_installed_librarys_model_is_placed_there_and_low(tmp_path):
    """A model file that only builds a library's model (a transformers MoE): no line of the user's leads to
    the router's nonzero; it is found at the library's line, said to be the library's, LOW at most."""
    library = tmp_path / "lib" / "python3.11" / "site-packages" / "routing_lib"
    library.mkdir(parents=True)
    write_model(library, """
        import torch
        class Router(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.gate = torch.nn.Linear(16, 4)
                self.experts = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(4))
            def forward(self, x):
                routes = self.gate(x).argmax(-1)
                out = torch.zeros_like(x)
                for index, expert in enumerate(self.experts):
                    rows = (routes == index).nonzero().squeeze(-1)  # LIBRARY SYNC
                    out[rows] = expert(x[rows])
                return out
    """, name="__init__.py")
    path = write_model(tmp_path, f"""
        import sys
        import torch
        sys.path.insert(0, {str(library.parent)!r})
        from routing_lib import Router
        def get_model(): return Router()
        def get_inputs(): return torch.randn(64, 16)
    """)
    [finding] = _host_sync(audit(path, tmp_path / "out"))
    [place] = finding.locations
    assert (place.file, place.line) == (str(library / "__init__.py"), line_of(library / "__init__.py", "LIBRARY SYNC"))
    assert place.count_per_step == 4
    assert "no line of your code is involved" in finding.message
    assert finding.severity.value == "low"


@pytest.mark.slow
def test_thresholds_change_what_is_reported(sample_audit, tmp_path):
    result = audit(SAMPLES / "host_sync.py", tmp_path / "out", settings=("host-sync.min_per_step=5",))
    assert _host_sync(result) == []  # each line syncs 4 times per step
    assert _host_sync(sample_audit("host_sync"))  # and the default does report


def test_recorded_gpu_trace_syncs_are_reported_under_their_operator():
    trace = parse_trace(str(shared_trace("critical_path/cuda_event_sync/event_sync_trace.json.gz")))
    evidence = Evidence(target=TargetInfo(model_file="recorded", device="cuda"), trace=trace)
    findings, problems = run_rules(load_rules(), evidence)
    assert problems == []
    [finding] = [f for f in findings if f.slug == "host-sync"]
    labels = sorted(loc.label() for loc in finding.locations)
    assert labels == ["in aten::is_nonzero", "in cudaDeviceSynchronize", "in cudaEventSynchronize"]
    blocked_ms = finding.evidence["blocked_ms_per_step"]
    assert blocked_ms > 0
    assert finding.impact == pytest.approx(blocked_ms / (trace.mean_step_us() / 1000), rel=0.02)


def test_recorded_trace_without_step_markers_does_not_claim_per_step_rates():
    trace = parse_trace(str(shared_trace("with_gpu_user_annotation/step_based_trace_2543932.json.gz")))
    evidence = Evidence(target=TargetInfo(model_file="recorded", device="cuda"), trace=trace)
    [finding] = [f for f in run_rules(load_rules(), evidence)[0] if f.slug == "host-sync"]
    assert "in the trace (it marks no ProfilerStep)" in finding.message
    assert finding.severity.value == "medium" and finding.locations[0].label() == "in aten::to"


def test_tensors_made_on_the_host_are_told_apart_from_the_models_and_the_moved():
    import torch

    from advisor.capture.annotate import SourceAnnotator

    annotator = SourceAnnotator()
    layer = torch.nn.Linear(4, 4)
    with annotator:
        index = torch.randint(10, (3,))  # no device: on the host in any run
        items = list(index)  # for i in index: each item a host tensor too
        shifted = index + 1
        moved = torch.randint(10, (3,)).to("cpu")  # .to(device): where the run's device is
        made_there = torch.zeros(3, device="cpu")
        output = layer(torch.randn(2, 4))  # the model's
        mixed = output.sum(0)[:3] + index
    host = annotator.host
    assert index in host and all(item in host for item in items) and shifted in host
    assert moved not in host and made_there not in host and output not in host and mixed not in host


def test_a_mean_count_per_step_is_said_to_a_tenth():
    # counts averaged over the profiled steps: makemore's "21.6667 host sync(s) per step" read as a measurement
    # more exact than three steps can give
    from advisor.rules.application.host_sync import _rate

    assert _rate(8.0) == "8" and _rate(0.5) == "0.5" and _rate(65 / 3) == "21.7" and _rate(1 / 3) == "0.3"


def _class_balanced(**env):
    from devkit.saved_evidence import saved_evidence

    evidence = saved_evidence("class_balanced_loss")
    return evidence.model_copy(update={"env": evidence.env.model_copy(update=env)})


def _sync_lines(evidence) -> set[int]:
    found, _ = run_rules(load_rules(), evidence)
    return {loc.line for f in found if f.slug == "host-sync" for loc in f.locations}


def test_a_call_syncs_by_what_its_operators_are_tagged_not_by_its_name():
    """torch.unique is found because torch tags aten::_unique2 dynamic_output_shape in the run's own torch; with
    that tag absent from the run's registry it is not; one_hot with num_classes, repeat_interleave with output_size
    and integer indexing, tagged too, have their size fixed by their arguments and wait for nothing."""
    path = SAMPLES / "class_balanced_loss.py"
    evidence = _class_balanced()
    assert evidence.env.sync_operators["aten::_unique2"] == "size"
    assert _sync_lines(evidence) == {line_of(path, "torch.unique(labels")}
    untagged = {name: kind for name, kind in evidence.env.sync_operators.items() if name != "aten::_unique2"}
    assert _sync_lines(_class_balanced(sync_operators=untagged)) == set()
    assert _sync_lines(_class_balanced(sync_operators={})) == {line_of(path, "torch.unique(labels")}  # torch 2.13's


def test_the_fallback_tags_are_torch_2_13s():
    import torch

    from advisor.capture.env import sync_operators
    from advisor.opnames import SYNC_OPERATORS_TORCH_2_13

    if not torch.__version__.startswith("2.13."):
        pytest.skip(f"the fallback is torch 2.13's tags; this is torch {torch.__version__}")
    assert sync_operators() == SYNC_OPERATORS_TORCH_2_13


def test_a_backwards_own_operators_are_not_the_users_syncs():
    """DDP's reducer reads its host-side map of used parameters inside loss.backward(): torch's, not a line to
    change (rank 0 of the 2-rank gloo job)."""
    from devkit.saved_evidence import DDP_DIR, saved_evidence

    evidence = saved_evidence("ddp_train", DDP_DIR)
    assert any(op.name == "aten::item" for op in evidence.trace.step_ops())
    assert line_of(SAMPLES / "scripts" / "ddp_train.py", "MICRO STEP LINE") not in _sync_lines(evidence)
