"""The garbage collector's passes inside an audited script's timed steps, as ``advisor run`` measured them
(``run/collector.py``), for the ``gc-pauses`` rule."""

from __future__ import annotations

from advisor.records import Field, Record


class CollectorPauses(Record):
    per_step_ms: list[float] = Field(default_factory=list, description="the collector's time in each timed step")
    passes: list[int] = Field(default_factory=list, description="passes over the timed steps, by generation 0-2")
    collected: int = Field(default=0, description="objects those passes freed (unreachable cycles)")
    thresholds: list[int] = Field(default_factory=list, description="gc.get_threshold() at the window's end")
    enabled: bool = True
    frozen: int = Field(default=0, description="objects gc.freeze() had set aside")
    survivors: list[dict] = Field(default_factory=list, description="where one warm-up step's objects that outlived "
                                  "it were made: {file, line, objects}, most first")
