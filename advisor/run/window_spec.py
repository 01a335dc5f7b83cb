"""What ``advisor run`` hands the step window inside the script: one typed record, each default declared here once
(the command line and ``RunOptions`` take theirs from here), validated when the parent writes it (``written``)
and when the script's bootstrap reads it (``read_window_spec``)."""

from __future__ import annotations

from advisor.records import Field, Record
from advisor.rulekit.rule import Finding

WARMUP_STEPS = 3  # steps run before the timed ones: the first, slowest steps are not the step
TIMED_STEPS = 20
PROFILED_STEPS = 3
CALL_STEPS = 10  # steps after the profiled ones, watched for torch.save, zero_grad, empty_cache, debug APIs


class AuditedModel(Record):
    """The model the audit run found, which a verification run finds again at its first call."""

    __pydantic_config__ = {"extra": "forbid"}  # a misspelt field fails, named (a dict: pydantic loads on first use)

    class_name: str = Field(description="its class")
    params: int = Field(default=0, description="its parameter count")

    @classmethod
    def of(cls, target) -> AuditedModel | None:
        """The module whose forward a fix changes, from the audit run's ``TargetInfo``: the one the step calls where
        it is not the model named (a LightningModule whose step calls its parts), else the model."""
        if target.called_module:
            return cls(class_name=target.called_module, params=target.called_params)
        return cls(class_name=target.model_class, params=target.param_count or 0) if target.model_class else None


class BlocksSpec(Record):
    """A verification run's A/B inside one run: its fixes switched on and off by blocks of steps."""

    __pydantic_config__ = {"extra": "forbid"}

    block: int = Field(description="timed steps per block (one more runs first, after the switch)")
    most_pairs: int = Field(description="pairs of blocks at most")
    exact: bool = Field(default=False, description="--pairs N: exactly N pairs, not fewer on a verdict")
    deadline: float = Field(default=0.0, description="wall clock (time.time()) after which no pair starts; 0: none")


class WindowSpec(Record):
    __pydantic_config__ = {"extra": "forbid"}

    script: str = Field(default="", description="the script advisor runs (its path, as given)")
    out_dir: str = Field(default="", description="where the window writes (set by launch; a rank's folder inside)")
    warmup_steps: int = Field(default=WARMUP_STEPS, description="steps before the timed ones")
    steps: int = Field(default=TIMED_STEPS, description="timed steps")
    profile_steps: int = Field(default=PROFILED_STEPS, description="profiled steps, after the timed ones")
    call_steps: int = Field(default=CALL_STEPS, description="steps watched for calls, after the profiled ones")
    full: bool = Field(default=False, description="--full: the script runs to its end")
    step_marker: str = Field(default="", description="--step-marker: the function whose returns end a step")
    mode: str = Field(default="", description="train | inference as --mode said; empty: from the signs")
    rank: int | None = Field(default=None, description="the rank, under torchrun (set in the rank's process)")
    # a verification run's (measure_only): the audit run's findings about the script, and the fixes under test
    measure_only: bool = Field(default=False, description="time the window, nothing else")
    kind: str | None = Field(default=None, description="what ended a step in the audit run (run/kinds.py)")
    device: str = Field(default="", description="the audit run's device")
    model: AuditedModel | None = Field(default=None, description="the audit run's model")
    step_ms: float | None = Field(default=None, description="the audit run's median step, for the verification's "
                                                            "schedule (read by the parent only)")
    rule_dirs: list[str] = Field(default_factory=list, description="--rules folders the fixes' rules come from")
    fixes: list[Finding] = Field(default_factory=list, description="the findings whose fixes are injected")
    switched: BlocksSpec | None = Field(default=None, description="an A/B inside the run, else whole runs")
    in_training: bool = Field(default=False, description="installed by a training callback in the user's own "
                                                         "training: never stops or reseeds the process, and switches "
                                                         "its fix off at its end")


def written(spec: WindowSpec, path: str) -> None:
    """``spec`` validated as the window will read it, then written to ``path``."""
    text = spec.model_dump_json()
    WindowSpec.model_validate_json(text)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def read_window_spec(path: str) -> WindowSpec:
    with open(path, encoding="utf-8") as handle:
        return WindowSpec.model_validate_json(handle.read())
