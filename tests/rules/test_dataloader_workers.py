"""dataloader-workers (ADV105): The data loader cannot keep up: batches are prepared in too few worker processes.
Its cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest
from test_rules_on_evidence import fired, only

from advisor.rulekit.engine import load_rules, run_rules
from advisor.rulekit.rule import Severity
from conftest import audit, share_finding, write_model
from devkit.saved_evidence import as_device, saved_evidence
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("dataloader-workers")


@pytest.mark.slow
def test_dataloader_workers_states_a_concrete_value_and_why(sample_audit):
    finding = share_finding(sample_audit("dataloader_workers"), "dataloader-workers")
    if finding is None:
        return  # measured beside another job: silent, and marked unreliable (share_finding)
    ev = sample_audit("dataloader_workers").evidence
    suggested = finding.evidence["workers_suggested"]
    assert f"num_workers={suggested}" in finding.fix.summary and suggested >= 1
    assert f"{ev.env.cpu_cores_available} cores" in finding.message and "thread" in finding.message
    # The batch and the step are timed in different stages; beside another job either may be the one stretched
    # (a step of 168 ms against batches of 37 ms was seen beside a busy-loop): their order holds on a quiet run.
    if sample_audit("dataloader_workers").report.quality.state != "contended":
        assert finding.evidence["batch_ms"] > finding.evidence["step_ms"]


def test_dataloader_workers_on_cuda_leaves_one_core_for_the_trainer():
    ev = saved_evidence("dataloader_workers")
    cuda = as_device(ev, "cuda", cpu_cores_available=16)
    finding = next(f for f in run_rules(load_rules(), cuda)[0] if f.slug == "dataloader-workers")
    assert finding.evidence["cores_free_for_workers"] == 15
    assert finding.evidence["workers_suggested"] == min(15, finding.evidence["workers_needed"])


@pytest.mark.slow
def test_persistent_workers_when_worker_start_up_dominates_short_epochs(tmp_path):
    path = write_model(tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        def get_model(): return torch.nn.Linear(4, 1)
        def get_inputs(): return torch.ones(8, 4)
        def get_optimizer(model): return torch.optim.SGD(model.parameters(), lr=0.1)
        def get_dataloader():
            data = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
            return DataLoader(data, batch_size=8, num_workers=2)  # two batches per epoch
    """)
    result = audit(path, tmp_path / "out")
    findings = [f for f in result.report.findings if f.slug == "dataloader-workers"]
    data = result.evidence.data
    assert data.num_workers == 2 and data.batches_per_epoch == 2 and data.first_batch_ms > 0
    # whether worker start-up shows over the batches (and reaches the threshold) is this machine's timing: under a
    # CPU hog the first batch came out faster than the median; the fast tier asserts the rule on saved evidence
    assert [f.severity for f in findings] in ([Severity.LOW], []), [f.message for f in result.report.findings]
    assert all("persistent_workers=True" in f.message for f in findings)


def test_persistent_workers_only_where_worker_start_up_is_paid_every_epoch():
    evidence = saved_evidence("many_workers")  # 4 workers, an 8-batch epoch, the first batch 5.7 ms against 0.85
    restarting = only(evidence, "dataloader-workers")
    assert "persistent_workers=True" in restarting.message and restarting.severity == Severity.LOW
    kept = evidence.model_copy(update={"data": evidence.data.model_copy(update={"persistent_workers": True})})
    assert "dataloader-workers" not in fired(kept)
    quick = evidence.model_copy(update={"data": evidence.data.model_copy(update={"first_batch_ms": 0.9})})
    assert "dataloader-workers" not in fired(quick)  # start-up under 10% of the epoch
