"""What an entry point gathered, in the one shape every entry point hands to the report assembly."""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.errors import StageError
from advisor.evidence import Evidence
from advisor.report.schema import ModelOutput, StageRecord


@dataclass
class Gathered:
    """What an entry point gathered, in the one shape every entry point hands to the assembly."""

    evidence: Evidence
    errors: list[StageError] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)
    output: ModelOutput = field(default_factory=ModelOutput)
    judge: bool = True  # False when there is nothing to judge (the model file did not load, no trace parsed)
