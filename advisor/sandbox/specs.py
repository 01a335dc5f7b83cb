"""What a parent hands a supervised child, one typed record per kind of child: the capture (an audit's stages),
a verification (fixes, or a patched copy, measured against the model), the readiness probes. Each default is
declared here once; a spec is validated when the parent writes it (``written``) and when the child reads it
(``read_spec``), so a field misspelt or missing fails at the parent, naming it, not as a stage's KeyError."""

from __future__ import annotations

import json
from typing import Literal, Union

from advisor.records import Field, Record
from advisor.rulekit.rule import Finding

FETCH_DEADLINE_S = 60.0  # a loader that hangs: its first batch is awaited this long at most


def fetch_deadline(timeout: float) -> float:
    """How long a child awaits a batch under a command's ``--timeout``: half of it, 60 s at most (so a hung loader
    fails its stage, naming the loader, before the command's timeout ends the whole child)."""
    return min(FETCH_DEADLINE_S, timeout / 2)


class ChildSpec(Record):
    """What every child reads: the model file, how to load it, and the folder and stages the supervisor gave it."""

    __pydantic_config__ = {"extra": "forbid"}  # a misspelt field fails, named (a dict: pydantic loads on first use)

    model_file: str = Field(description="the model file, absolute")
    mode: str = Field(default="auto", description="train | inference | auto (the file's own say)")
    device: str = Field(default="auto", description="cpu | cuda | auto")
    fetch_deadline_s: float = Field(default=FETCH_DEADLINE_S, description="how long a batch is awaited at most")
    workdir: str = Field(default="", description="the child's own folder (set by the supervisor)")
    stages: list[str] = Field(default_factory=list, description="the stages to run, in order (set by the supervisor)")
    stage_modules: list[str] = Field(default_factory=list, description="the modules that register them")


class CaptureSpec(ChildSpec):
    kind: Literal["capture"] = "capture"
    trace_path: str = Field(description="where the trace stage writes the Kineto trace")
    wait_for_quiet_s: float | None = Field(default=None, description="--wait-for-quiet; None: the machine's default")


class VerifySpec(ChildSpec):
    kind: Literal["verify"] = "verify"
    budget_s: float | None = Field(description="the time the measurement may take; None: --pairs decides")
    pairs: int | None = Field(default=None, description="--pairs: exactly this many A/B pairs")
    verify: list[Finding] = Field(default_factory=list, description="the findings whose fixes are measured together")
    rule_dirs: list[str] = Field(default_factory=list, description="--rules folders the fixes' rules come from")
    patched_model_file: str = Field(default="", description="a patched copy measured against model_file instead")
    tolerance: float | None = Field(default=None, description="what the patched copy's results may differ by "
                                                                  "(None: the patch changes no result)")
    through_loader: bool = Field(default=False, description="the patch changes the loader: time the step with it")


class ReadySpec(ChildSpec):
    kind: Literal["ready"] = "ready"
    batch_sizes: list[int] = Field(description="the batch sizes the latency is measured at")
    precision: str = Field(description="the reduced precision the precision probe compares")
    seconds_per_size: float = Field(description="timing per batch size")


AnySpec = Union[CaptureSpec, VerifySpec, ReadySpec]
KINDS: dict[str, type] = {"capture": CaptureSpec, "verify": VerifySpec, "ready": ReadySpec}


def written(spec: AnySpec, path: str) -> None:
    """``spec`` validated as the child will read it, then written to ``path``."""
    text = spec.model_dump_json()
    read_text(text)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def read_spec(path: str) -> AnySpec:
    with open(path, encoding="utf-8") as handle:
        return read_text(handle.read())


def read_text(text: str) -> AnySpec:
    """A spec's JSON validated against the record its ``kind`` names."""
    data = json.loads(text)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in KINDS:
        raise ValueError(f"a child's spec of unknown kind {kind!r} (one of {', '.join(KINDS)})")
    return KINDS[kind].model_validate(data)
