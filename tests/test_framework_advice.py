"""A callback's findings said in its framework's words: the rules' findings over saved evidence, as the Trainer's
and Lightning's callbacks reword them (neither framework is needed: the wording reads the settings the callback
hands it)."""

from __future__ import annotations

import pytest

from advisor.integrations.framework_advice import TrainingSettings, in_framework_words
from advisor.rulekit.engine import RuleConfig
from devkit.saved_evidence import saved_evidence

RULES = RuleConfig.load()


def _finding(sample: str, slug: str):
    [finding] = [f for f in RULES.run(saved_evidence(sample))[0] if f.slug == slug]
    return finding


def _said(finding, framework: str, entry=None, **values) -> str:
    in_framework_words([finding], TrainingSettings(framework, values, entry=entry))
    return finding.fix.summary


def test_mixed_precision_is_a_trainer_setting_and_never_offered_where_the_device_runs_it_slower():
    amp = _finding("gpt_block", "missing-amp")
    generic = amp.fix.summary
    amp.evidence["slower_on_this_device"] = False
    assert _said(amp, "transformers", bf16=False) == "train in mixed precision: TrainingArguments(bf16=True)"
    assert amp.fix.after == "TrainingArguments(..., bf16=True)" and amp.evidence["advice_without_framework"] == generic
    lightning = _finding("gpt_block", "missing-amp")
    lightning.evidence["slower_on_this_device"] = False
    assert _said(lightning, "lightning", precision="32-true") == \
        'train in mixed precision: Trainer(precision="bf16-mixed")'
    emulated = _finding("gpt_block", "missing-amp")
    emulated.evidence["slower_on_this_device"] = True
    assert _said(emulated, "transformers").startswith("leave TrainingArguments(bf16=False) on this device")


def test_a_precision_the_device_runs_slowly_is_turned_off_where_the_framework_turned_it_on():
    slow = _finding("gpu_style_autocast", "slow-precision")
    assert slow.evidence["autocast"]
    assert _said(slow, "transformers", bf16=True).startswith("TrainingArguments(bf16=False) on this device")
    assert slow.fix.before == "TrainingArguments(..., bf16=True)"
    again = _finding("gpu_style_autocast", "slow-precision")
    assert _said(again, "lightning", precision="bf16-mixed").startswith('Trainer(precision="32-true") on this device')


def test_the_loader_and_the_optimizer_are_set_where_the_framework_makes_them():
    loader = _finding("audio_loader", "dataloader-workers")
    workers = loader.evidence["workers_suggested"]
    assert _said(loader, "transformers", dataloader_num_workers=0) == (
        f"TrainingArguments(dataloader_num_workers={workers}, dataloader_persistent_workers=True)")
    again = _finding("audio_loader", "dataloader-workers")
    assert _said(again, "lightning").startswith(f"in train_dataloader(): DataLoader(..., num_workers={workers}")
    optimizer = _finding("gpt_block", "optimizer-foreach")
    name, better = optimizer.evidence["optimizer"], optimizer.evidence["suggested"]
    expected = 'the fused AdamW: TrainingArguments(optim="adamw_torch_fused")' if name in ("Adam", "AdamW") else None
    said = _said(optimizer, "transformers", optim="adamw_torch")
    assert said == expected if expected else "TrainingArguments" not in said
    lightning = _finding("gpt_block", "optimizer-foreach")
    assert _said(lightning, "lightning") == f"in configure_optimizers(): torch.optim.{name}(..., {better}=True)"


def test_a_sync_beneath_the_line_that_started_training_is_the_frameworks_and_the_users_own_stays_theirs():
    def beneath_one_line(kinds: list[str]):
        """The finding as a Trainer run's reads: every sync at the user's one line that started the training
        (tests/test_integrations.py has the real one: the Trainer's two bools a step)."""
        finding = _finding("host_sync", "host-sync")
        finding.locations, finding.evidence["kinds"] = finding.locations[:1], kinds
        return finding, (finding.locations[0].file, finding.locations[0].line)

    sync, place = beneath_one_line(["tensor used as a Python bool"])
    generic = sync.fix.summary
    assert "TrainingArguments(logging_nan_inf_filter=False)" in _said(sync, "transformers", entry=place,
                                                                       logging_nan_inf_filter=True)
    reads, place = beneath_one_line([".item()/scalar read"])  # not the Trainer's check: no setting claimed
    assert _said(reads, "transformers", entry=place, logging_nan_inf_filter=True).startswith(
        "this lies in the transformers library's own code")
    own = _finding("host_sync", "host-sync")  # the user's own line, not the one that started training
    assert _said(own, "transformers", entry=("/elsewhere/train.py", 3), logging_nan_inf_filter=True) == generic
    assert "advice_without_framework" not in own.evidence
    lightning, place = beneath_one_line(["tensor used as a Python bool"])  # no setting: the library's code
    said = _said(lightning, "lightning", entry=place)
    assert said.startswith("this lies in the lightning library's own code") and generic in said


@pytest.mark.parametrize("framework", ["transformers", "lightning"])
def test_a_rule_without_a_setting_keeps_its_advice_in_the_users_code(framework):
    finding = _finding("host_sync", "host-sync")
    generic = finding.fix.summary
    assert _said(finding, framework) == generic and "advice_without_framework" not in finding.evidence
