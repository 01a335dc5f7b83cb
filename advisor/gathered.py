"""What an entry point gathered, in the one shape every entry point hands to the report assembly: the evidence,
the errors of the stages that failed, each stage's record and the model's own output."""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.errors import StageError
from advisor.evidence import Evidence
from advisor.records import Record


class StageRecord(Record):
    stage: str
    status: str
    seconds: float = 0.0
    note: str = ""


class ModelOutput(Record):
    stdout: str = ""
    stderr: str = ""


@dataclass
class Gathered:
    """What an entry point gathered, in the one shape every entry point hands to the assembly."""

    evidence: Evidence
    errors: list[StageError] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)
    output: ModelOutput = field(default_factory=ModelOutput)
    judge: bool = True  # False when there is nothing to judge (the model file did not load, no trace parsed)
