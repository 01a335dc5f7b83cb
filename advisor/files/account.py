"""The account of what advisor's runs did to the user's files, as the report holds it."""

from __future__ import annotations

from advisor.records import Field, Record


class FileChange(Record):
    path: str = Field(description="resolved, and relative to the working directory where it lies under it")
    change: str = Field(description="created | modified | deleted | unchanged")
    size: int | None = Field(default=None, description="bytes after the run (a folder: the files in it)")


class ExperimentRun(Record):
    label: str = Field(description="baseline, or the fixes the run carried")
    seconds: float = 0.0
    exit_code: int | None = None
    shadow_files: int = Field(default=0, description="files the run wrote, into the shadow thrown away after it")
    shadow_bytes: int = 0
    output_head: str = Field(default="", description="the first lines the run printed")


class FilesRecord(Record):
    """What advisor's runs did to the user's files: the audited run's real writes, the experiments' shadow."""

    written: list[FileChange] = Field(default_factory=list, description="by the audited run, for real")
    temporary: int = Field(default=0, description="files the audited run created and removed again")
    stopped: str = Field(default="", description="how the audited run ended")
    not_kept: list[str] = Field(default_factory=list,
                                description="paths the audited run changed whose earlier state advisor could not keep")
    unrouted: list[str] = Field(default_factory=list,
                                description="what advisor saw but could not route: programs the runs started, ...")
    experiment_runs: list[ExperimentRun] = Field(default_factory=list)
    checked: int = Field(default=0, description="paths compared before and after the experiment runs")
    changed: list[str] = Field(default_factory=list, description="user paths changed while the experiments ran")
