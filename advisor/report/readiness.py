"""What ``advisor ready`` measured and decided: the readiness section of a report.

Measured values (``ReadyEvidence``, gathered in the supervised child) and the checks decided
from them (``Readiness``, pure) are kept apart, so the checks run over saved evidence.
"""

from __future__ import annotations

from typing import Any, Literal

from advisor.evidence import Location
from advisor.machine.state import MeasurementConditions
from advisor.records import Field, Record

CheckStatus = Literal["pass", "warn", "fail", "skipped"]
CHECK_IDS = ("eval-mode", "inference-mode", "export", "compile", "recompiles", "determinism", "latency-budget",
             "memory", "cold-start", "reduced-precision")


class Percentile(Record):
    ms: float
    ci_low: float
    ci_high: float


class LatencyRow(Record):
    batch_size: int
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    p50: Percentile | None = None
    p90: Percentile | None = None
    p99: Percentile | None = None
    samples: int = 0
    throughput_per_s: float | None = None
    peak_memory_mb: float | None = Field(default=None, description="CUDA allocator peak, or RSS growth on CPU")
    samples_ms: list[float] = Field(default_factory=list, description="every timed call, for later comparison")
    error: str = Field(default="", description="why the model failed at this batch size")
    error_location: Location | None = None
    p99_estimate: bool = Field(default=False, description="too few samples for p99 to be more than an estimate")
    conditions: MeasurementConditions | None = Field(default=None, description="the machine while it was timed")
    windows_ms: list[float] = Field(default_factory=list, description="each timing window's p50 (a fresh batch)")
    run_noise: float | None = Field(default=None, description="the windows' p50s' relative standard deviation: "
                                                              "run-to-run noise, in every percentile's interval")


class ReadyCheck(Record):
    id: str
    status: CheckStatus
    message: str
    values: dict[str, Any] = Field(default_factory=dict)
    locations: list[Location] = Field(default_factory=list)
    borderline: bool = Field(default=False, description="its value lies within its noise of the threshold: another "
                                                        "run may decide otherwise (advisor diff does not call it a change)")


class Readiness(Record):
    checks: list[ReadyCheck] = Field(default_factory=list)
    latency: list[LatencyRow] = Field(default_factory=list)
    recommended_batch_size: int | None = None
    latency_budget_ms: float | None = None
    precision: str = "bf16"

    def check(self, check_id: str) -> ReadyCheck | None:
        return next((c for c in self.checks if c.id == check_id), None)

    @property
    def worst(self) -> str:
        statuses = {c.status for c in self.checks}
        return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"
