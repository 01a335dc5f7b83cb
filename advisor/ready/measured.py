"""What ``advisor ready`` measured, stage by stage, in the supervised child; checks read only this."""

from __future__ import annotations

from advisor.records import Field, Record
from advisor.report.readiness import LatencyRow
from advisor.rulekit.rule import Location


class Blocker(Record):
    """One reason something failed, at the user's line when it has one."""

    message: str
    location: Location | None = None


class TrainingModule(Record):
    path: str = Field(description="the submodule's name in the model")
    kind: str = Field(description="its class: Dropout, BatchNorm2d, ...")
    location: Location | None = None


class ModesEvidence(Record):
    training_modules: list[TrainingModule] = Field(default_factory=list)
    inference_mode_error: Blocker | None = None
    grad_outputs: bool = Field(default=False, description="outputs require grad under torch.no_grad(): the forward turns grad on")
    grad_ms: float | None = Field(default=None, description="median call with autograd recording, as a bare call runs")
    inference_ms: float | None = Field(default=None, description="median call under torch.inference_mode()")


class ExportEvidence(Record):
    non_strict: bool = False
    strict: bool = False
    blockers: list[Blocker] = Field(default_factory=list)
    error: str = Field(default="", description="the first failure, in one line")


class CompileEvidence(Record):
    fullgraph: bool = False
    graphs: int = 0
    breaks: list[Blocker] = Field(default_factory=list)
    error: str = ""


class Recompile(Record):
    batch_size: int
    reason: str
    from_user_code: bool
    location: Location | None = None


class RecompileEvidence(Record):
    batch_sizes: list[int] = Field(default_factory=list)
    graphs: int = 0
    recompiles: list[Recompile] = Field(default_factory=list)
    error: str = ""
    compile_s: float | None = Field(default=None, description="first call of the compiled model")


class DeterminismEvidence(Record):
    equal: bool = True
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    equal_when_seeded: bool | None = None
    random_ops: list[Blocker] = Field(default_factory=list)
    nondeterministic_ops: list[Blocker] = Field(default_factory=list)


class ColdStartEvidence(Record):
    first_call_ms: float
    warm_ms: float


class PrecisionEvidence(Record):
    dtype: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    native: bool = False
    native_note: str = ""
    fp32_ms: float | None = None
    reduced_ms: float | None = None
    error: Blocker | None = None


class MemoryBudget(Record):
    available_mb: float | None = None
    what: str = Field(default="", description="what the figure is: the GPU's total memory, the host's available memory")


class ReadyEvidence(Record):
    batch_sizes: list[int] = Field(default_factory=list)
    modes: ModesEvidence | None = None
    export: ExportEvidence | None = None
    compile: CompileEvidence | None = None
    recompiles: RecompileEvidence | None = None
    determinism: DeterminismEvidence | None = None
    latency: list[LatencyRow] = Field(default_factory=list)
    memory: MemoryBudget | None = None
    cold_start: ColdStartEvidence | None = None
    precision: PrecisionEvidence | None = None
    skipped: dict[str, str] = Field(default_factory=dict, description="stage -> why it did not run")
