"""A finding's fix said in the words of the framework that runs the training: a callback's user sets
``TrainingArguments(bf16=True)`` or ``Trainer(precision="bf16-mixed")``; the framework's loop is not theirs to edit.

Each framework's table maps a rule to the setting that applies its fix, from what the training was configured with
(read from the framework's own objects when training begins: ``TrainingSettings``) and the device the report
measured. A rule without a setting keeps advisor's own advice; where the finding lies inside the framework (its
places all in the framework's code, or at the user's one line that started the training: ``trainer.train()``), the
fix says so instead of offering an edit there. The advice the rule gave is kept in the finding's evidence
(``advice_without_framework``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from advisor.rulekit.helpers import is_ampere_or_newer
from advisor.rulekit.rule import Finding, Fix
from advisor.sources import is_library_path

HF_DOCS = "https://huggingface.co/docs/transformers/main_classes/trainer#transformers.TrainingArguments"
LIGHTNING_DOCS = "https://lightning.ai/docs/pytorch/stable/common/trainer.html"


@dataclass
class TrainingSettings:
    """What the framework was configured with, as its objects hold it (``TrainingArguments``' fields; Lightning's
    ``trainer.precision``), and the report's environment, for the device."""

    framework: str  # "transformers" | "lightning"
    values: dict[str, object] = field(default_factory=dict)
    environment: object = None
    entry: tuple[str, int] | None = None  # the user's line that started the training (trainer.train(), .fit())

    def inside(self, finding: Finding) -> bool:
        """The finding lies in the framework's code: each of its places is the framework's, or the line that called
        into it (what ran beneath that line is the framework's loop, not the user's code)."""
        return bool(finding.locations) and all(
            (location.file, location.line) == self.entry or (location.file and is_library_path(location.file))
            for location in finding.locations)


def entry_line() -> tuple[str, int] | None:
    """The innermost line of the user's own code on the current stack: where a callback's training was started."""
    import traceback

    for frame in reversed(traceback.extract_stack()):
        if frame.filename and not is_library_path(frame.filename):
            return frame.filename, frame.lineno or 0
    return None


def _call(framework: str, **settings: object) -> str:
    arguments = ", ".join(f"{name}={value!r}" for name, value in settings.items())
    return f"TrainingArguments(..., {arguments})" if framework == "transformers" else f"Trainer(..., {arguments})"


def _setting(framework: str, summary: str, before: dict, after: dict, docs: str) -> Fix:
    return Fix(summary=summary, before=_call(framework, **before), after=_call(framework, **after), docs=[docs])


def _reduced(settings: TrainingSettings) -> str:
    """The reduced precision this device runs fast: bf16 where it has bf16 tensor cores or a CPU, else fp16."""
    env = settings.environment
    on_gpu = env is not None and getattr(env, "gpu_capability", None) is not None
    return "bf16" if not on_gpu or is_ampere_or_newer(env) else "fp16"


# --- the Hugging Face Trainer: TrainingArguments -------------------------------------------------------------------

def _hf_amp(finding: Finding, s: TrainingSettings) -> Fix | None:
    if finding.evidence.get("slower_on_this_device"):
        return Fix(summary="leave TrainingArguments(bf16=False) on this device (bf16 is emulated here); set "
                           "bf16=True where the training runs on a GPU or a CPU with native bf16", docs=[HF_DOCS])
    flag = _reduced(s)
    return _setting("transformers", f"train in mixed precision: TrainingArguments({flag}=True)", {flag: False},
                    {flag: True}, HF_DOCS)


def _hf_precision(finding: Finding, s: TrainingSettings) -> Fix | None:
    on = [flag for flag in ("bf16", "fp16") if s.values.get(flag)]
    if finding.evidence.get("autocast") and on:
        return _setting("transformers", f"TrainingArguments({on[0]}=False) on this device: it runs "
                                        f"{finding.evidence.get('dtype', on[0])} far slower than float32",
                        {on[0]: True}, {on[0]: False}, HF_DOCS)
    return Fix(summary="load the model in float32 on this device: from_pretrained(..., torch_dtype=torch.float32)",
               docs=[HF_DOCS])


def _hf_workers(finding: Finding, s: TrainingSettings) -> Fix | None:
    workers = finding.evidence.get("workers_suggested") or finding.evidence.get("suggested_workers")
    if not workers:
        return None
    return _setting("transformers", f"TrainingArguments(dataloader_num_workers={workers}, "
                                    "dataloader_persistent_workers=True)",
                    {"dataloader_num_workers": s.values.get("dataloader_num_workers", 0)},
                    {"dataloader_num_workers": workers, "dataloader_persistent_workers": True}, HF_DOCS)


def _hf_fused(finding: Finding, s: TrainingSettings) -> Fix | None:
    if finding.evidence.get("optimizer") not in ("AdamW", "Adam"):
        return None
    return _setting("transformers", "the fused AdamW: TrainingArguments(optim=\"adamw_torch_fused\")",
                    {"optim": str(s.values.get("optim", "adamw_torch"))}, {"optim": "adamw_torch_fused"}, HF_DOCS)


def _hf_sync(finding: Finding, s: TrainingSettings) -> Fix | None:
    # the Trainer checks each step's loss with torch.isnan(...) or torch.isinf(...) as Python bools (two syncs a
    # step) while logging_nan_inf_filter is on, its default
    if not s.inside(finding) or not s.values.get("logging_nan_inf_filter") or "tensor used as a Python bool" not in \
            finding.evidence.get("kinds", []):
        return None
    return _setting("transformers", "the Trainer's per-step check of the loss for nan/inf is a Python bool on a "
                                    "tensor: TrainingArguments(logging_nan_inf_filter=False) (the loss is then "
                                    "logged as it is)", {"logging_nan_inf_filter": True},
                    {"logging_nan_inf_filter": False}, HF_DOCS)


TRANSFORMERS: dict[str, Callable[[Finding, TrainingSettings], Fix | None]] = {
    "host-sync": _hf_sync,
    "missing-amp": _hf_amp,
    "slow-precision": _hf_precision,
    "dataloader-workers": _hf_workers,
    "dataloader-too-many-workers": _hf_workers,
    "dataloader-pin-memory": lambda f, s: _setting("transformers", "TrainingArguments(dataloader_pin_memory=True)",
                                                   {"dataloader_pin_memory": False}, {"dataloader_pin_memory": True},
                                                   HF_DOCS),
    "optimizer-foreach": _hf_fused,
    "kernel-storm": lambda f, s: _setting("transformers", "compile the model: TrainingArguments(torch_compile=True)",
                                          {"torch_compile": False}, {"torch_compile": True}, HF_DOCS),
    "tf32-disabled": lambda f, s: _setting("transformers", "TF32 tensor cores: TrainingArguments(tf32=True)",
                                           {"tf32": False}, {"tf32": True}, HF_DOCS),
    "find-unused-parameters": lambda f, s: _setting("transformers", "TrainingArguments(ddp_find_unused_parameters="
                                                    "False)", {"ddp_find_unused_parameters": True},
                                                    {"ddp_find_unused_parameters": False}, HF_DOCS),
}


# --- Lightning: Trainer(precision=...), the LightningModule's hooks -------------------------------------------------

def _pl_amp(finding: Finding, s: TrainingSettings) -> Fix | None:
    if finding.evidence.get("slower_on_this_device"):
        return Fix(summary='leave Trainer(precision="32-true") on this device (bf16 is emulated here); '
                           'precision="bf16-mixed" where the training runs on a GPU or a CPU with native bf16',
                   docs=[LIGHTNING_DOCS])
    mixed = "bf16-mixed" if _reduced(s) == "bf16" else "16-mixed"
    return _setting("lightning", f'train in mixed precision: Trainer(precision="{mixed}")',
                    {"precision": str(s.values.get("precision", "32-true"))}, {"precision": mixed}, LIGHTNING_DOCS)


def _pl_precision(finding: Finding, s: TrainingSettings) -> Fix | None:
    return _setting("lightning", 'Trainer(precision="32-true") on this device: it runs '
                                 f"{finding.evidence.get('dtype', 'the reduced precision')} far slower than float32",
                    {"precision": str(s.values.get("precision", "bf16-mixed"))}, {"precision": "32-true"},
                    LIGHTNING_DOCS)


def _pl_workers(finding: Finding, s: TrainingSettings) -> Fix | None:
    workers = finding.evidence.get("workers_suggested") or finding.evidence.get("suggested_workers")
    if not workers:
        return None
    return Fix(summary=f"in train_dataloader(): DataLoader(..., num_workers={workers}, persistent_workers=True)",
               before="def train_dataloader(self):\n    return DataLoader(self.train_set, batch_size=32)",
               after=f"def train_dataloader(self):\n    return DataLoader(self.train_set, batch_size=32, "
                     f"num_workers={workers},\n                      persistent_workers=True)",
               docs=["https://lightning.ai/docs/pytorch/stable/data/datamodule.html"])


def _pl_fused(finding: Finding, s: TrainingSettings) -> Fix | None:
    name, better = finding.evidence.get("optimizer"), finding.evidence.get("suggested")
    if not name or not better:
        return None
    return Fix(summary=f"in configure_optimizers(): torch.optim.{name}(..., {better}=True)",
               before=f"def configure_optimizers(self):\n    return torch.optim.{name}(self.parameters(), lr=1e-3)",
               after=f"def configure_optimizers(self):\n    return torch.optim.{name}(self.parameters(), lr=1e-3, "
                     f"{better}=True)",
               docs=["https://lightning.ai/docs/pytorch/stable/common/optimization.html"])


LIGHTNING: dict[str, Callable[[Finding, TrainingSettings], Fix | None]] = {
    "missing-amp": _pl_amp,
    "slow-precision": _pl_precision,
    "dataloader-workers": _pl_workers,
    "dataloader-too-many-workers": _pl_workers,
    "dataloader-pin-memory": lambda f, s: Fix(summary="in train_dataloader(): DataLoader(..., pin_memory=True)",
                                              docs=["https://lightning.ai/docs/pytorch/stable/data/datamodule.html"]),
    "optimizer-foreach": _pl_fused,
    "kernel-storm": lambda f, s: Fix(summary="compile the module before fitting: model = torch.compile(model); "
                                             "trainer.fit(model)", before="trainer.fit(model)",
                                     after="trainer.fit(torch.compile(model))",
                                     docs=["https://lightning.ai/docs/pytorch/stable/advanced/compile.html"]),
    "find-unused-parameters": lambda f, s: _setting("lightning", 'Trainer(strategy="ddp"): find_unused_parameters '
                                                    "is off there", {"strategy": "ddp_find_unused_parameters_true"},
                                                    {"strategy": "ddp"}, LIGHTNING_DOCS),
}

TABLES = {"transformers": TRANSFORMERS, "lightning": LIGHTNING}


def in_framework_words(findings: list[Finding], settings: TrainingSettings) -> None:
    """Each finding's fix as the framework's setting where one applies it; otherwise advisor's own, said as not an
    edit of the framework's code where every place of the finding lies there."""
    table = TABLES[settings.framework]
    for finding in findings:
        said = table.get(finding.slug, lambda f, s: None)(finding, settings)
        if said is None and finding.fix is not None and settings.inside(finding):
            said = Fix(summary=f"this lies in the {settings.framework} library's own code, beneath the line that "
                               "started the training: no setting of the framework applies the fix, and no edit of "
                               f"your code does (in the library: {finding.fix.summary})", docs=finding.fix.docs)
        if said is not None:
            if finding.fix is not None:
                finding.evidence["advice_without_framework"] = finding.fix.summary
            finding.fix = said
