"""Install the file layer a parent asked for, in a process of the run (called by the bootstrap).

``ADVISOR_FILES`` names a JSON spec (``FileLayerSpec``). Every Python process that inherits it installs
the layer (the script, each torchrun rank, a spawned worker, a Python subprocess), so they share one
journal or one shadow through the folders on disk. The spec is checked as a record when written and when read
(its fields, and the mode), without pydantic: every process of the run reads it at its start.
"""

from __future__ import annotations

import json
import os
from typing import Literal

from advisor.records import Field, Record

ENVIRONMENT = "ADVISOR_FILES"


class FileLayerSpec(Record):
    mode: Literal["journal", "shadow"] = Field(description="journal: the audited run's real writes, kept; shadow: "
                                                           "an experiment's writes, kept apart")
    journal: str = Field(description="the journal's folder (a shadow reads the files as the audited run left them)")
    shadow: str = Field(default="", description="the shadow's folder (mode shadow)")
    limit: int = Field(description="bytes the layer may keep")
    passthrough: list[str] = Field(default_factory=list, description="paths written through, untouched (advisor's)")

    def checked(self) -> FileLayerSpec:
        if self.mode not in ("journal", "shadow") or (self.mode == "shadow" and not self.shadow):
            raise ValueError(f"a file layer spec of mode {self.mode!r} (journal, or shadow with its folder)")
        return self

    def write(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.checked().model_dump(), handle)

    @classmethod
    def read(cls, path: str) -> FileLayerSpec:
        with open(path, encoding="utf-8") as handle:
            return cls(**json.load(handle)).checked()  # a field missing or unknown raises TypeError, naming it


def activate(spec_path: str):
    from advisor.files import interpose
    from advisor.files.journal import Journal
    from advisor.files.shadow import Shadow

    spec = FileLayerSpec.read(spec_path)
    if spec.mode == "journal":
        layer = Journal(spec.journal, spec.limit, spec.passthrough)
    else:
        layer = Shadow(spec.shadow, spec.journal, spec.limit, spec.passthrough)
    interpose.install(layer)
    return layer


def activate_from_environment():
    spec_path = os.environ.get(ENVIRONMENT)
    return activate(spec_path) if spec_path else None
