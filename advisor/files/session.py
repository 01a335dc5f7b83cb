"""The parent's side of the user's files, for one audit: the journal of the audited run, a fresh shadow
for each experiment run, and what they recorded, for the report.

Every folder advisor needs for a run lies under one scratch folder (the journal, each run's shadow,
its temporary files, the step window's own files), which the layers pass through and which is
removed at the end.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field

from advisor.files.account import ExperimentRun, FileChange, FilesRecord
from advisor.files.activate import ENVIRONMENT, FileLayerSpec
from advisor.files.base import Base
from advisor.files.journal import WRITTEN_LOG, tree_size
from advisor.files.log import read_log
from advisor.files.scope import compiler_caches
from advisor.files.shadow import EVENTS_LOG

OUTPUT_HEAD = 600  # characters of each experiment run's output kept for the report


def default_limit(folder: str) -> int:
    """A third of the free space where the scratch lies: the journal and one run's shadow at a time."""
    return shutil.disk_usage(folder).free // 3


def shown(path: str, cwd: str) -> str:
    """A path as the report shows it: resolved, relative to the working directory where it lies under it."""
    return os.path.relpath(path, cwd) if path == cwd or path.startswith(cwd.rstrip("/") + "/") else path


@dataclass
class FileSession:
    folder: str
    limit: int
    cwd: str = field(default_factory=lambda: os.path.realpath(os.getcwd()))
    passthrough: list[str] = field(default_factory=list)
    runs: list[ExperimentRun] = field(default_factory=list)
    unrouted: list[str] = field(default_factory=list)  # the experiment runs' unfollowed doings, one line per program
    unrouted_found: list[tuple[str, str]] = field(default_factory=list)  # (program or path, its sentence), each seen
    before: dict[str, tuple] = field(default_factory=dict)  # path -> its state once the audited run ended
    touched: set[str] = field(default_factory=set)  # paths the experiment runs wrote or deleted (in their shadows)
    experiments_began_ns: int = 0

    @classmethod
    def start(cls, limit_mb: float | None = None) -> FileSession:
        folder = os.path.realpath(tempfile.mkdtemp(prefix="advisor-files-"))
        limit = int(limit_mb * 1e6) if limit_mb else default_limit(folder)
        return cls(folder=folder, limit=limit, passthrough=[folder, *compiler_caches(os.environ, tempfile.gettempdir())])

    @property
    def journal(self) -> str:
        return os.path.join(self.folder, "journal")

    def scratch(self, prefix: str) -> str:
        """A folder of advisor's own for a run (the layers pass it through)."""
        return tempfile.mkdtemp(prefix=prefix, dir=self.folder)

    def _spec(self, name: str, mode: str, shadow: str = "") -> dict[str, str]:
        path = os.path.join(self.folder, name)
        FileLayerSpec(mode=mode, journal=self.journal, shadow=shadow, limit=self.limit,
                      passthrough=list(self.passthrough)).write(path)
        return {ENVIRONMENT: path}

    def journal_environment(self) -> dict[str, str]:
        """For the audited run: its writes are real, and journaled."""
        os.makedirs(self.journal, exist_ok=True)
        return self._spec("journal.json", "journal")

    def shadow_environment(self) -> tuple[dict[str, str], str]:
        """For one experiment run: a fresh shadow over the files as the audited run found them, its own
        temporary folder, and the compile cache every run shares."""
        if not self.experiments_began_ns:
            self.experiments_began_ns = time.time_ns()
        arm = self.scratch("run-")
        os.makedirs(os.path.join(arm, "tmp"))
        caches = compiler_caches(os.environ, tempfile.gettempdir())
        environment = self._spec(os.path.join(os.path.basename(arm), "files.json"), "shadow",
                                 shadow=os.path.join(arm, "shadow"))
        environment.update(TMPDIR=os.path.join(arm, "tmp"), TORCHINDUCTOR_CACHE_DIR=caches[0], ADVISOR_FILES_REQUIRED="1")
        return environment, arm

    # --- what the audited run did ----------------------------------------------------------------
    def claims(self) -> list:
        return sorted(Base.load(self.journal).claims.values(), key=lambda claim: claim.ns)

    def journaled(self) -> bool:
        """Whether the audited run's processes installed the journal (the bootstrap may have failed)."""
        entries, _ = read_log(os.path.join(self.journal, WRITTEN_LOG))
        return any(e.get("op") == "installed" for e in entries)

    def refusal(self) -> str | None:
        """Why the experiment runs cannot start from the files as the audited run found them, or None."""
        if not self.journaled():
            return ("the audited run's writes were not journaled (advisor's bootstrap did not install in its "
                    "process; see its output), so experiment runs could not start from the same files")
        lost = self._lost()
        if not lost:
            return None
        path, why = lost[0]
        return (f"the audited run changed {path}, and advisor could not keep its earlier state ({why})"
                + (f"; {len(lost) - 1} more path(s) likewise" if len(lost) > 1 else "")
                + ": experiment runs would not start from the same files, so none was run")

    def _lost(self) -> list[tuple[str, str]]:
        lost = [(shown(c.path, self.cwd), c.reason) for c in self.claims() if c.state == "unsaved"]
        entries, _ = read_log(os.path.join(self.journal, WRITTEN_LOG))
        lost += [(shown(e["path"], self.cwd), f"not journaled: {e.get('reason', '')}") for e in entries
                 if e.get("op") == "unjournaled"]
        return lost

    def not_kept(self) -> list[str]:
        return [f"{path}: {why}" for path, why in self._lost()]

    def written(self) -> list[FileChange]:
        changes = []
        for claim in self.claims():
            now = _state(claim.path)
            if claim.state == "absent":
                change = "created" if now else "created and removed"
            elif not now:
                change = "deleted"
            elif claim.state == "saved" and _same(claim.stored, claim.path):
                change = "unchanged"
            else:
                change = "modified"
            changes.append(FileChange(path=shown(claim.path, self.cwd), change=change, size=_size(claim.path) if now else None))
        return changes

    def audited_programs(self) -> list[str]:
        entries, _ = read_log(os.path.join(self.journal, WRITTEN_LOG))
        installed = {e["pid"] for e in entries if e.get("op") == "installed"}
        return _grouped([d for e in entries if (d := _unrouted(e, installed, "the audited run"))])

    def remember(self) -> None:
        """The state the audited run left (what the experiments must not change), taken before them."""
        for claim in self.claims():
            self.before[claim.path] = _state(claim.path)
        for name in os.listdir(self.cwd):
            path = os.path.join(self.cwd, name)
            self.before.setdefault(path, _state(path))

    # --- the experiment runs ---------------------------------------------------------------------
    def finish_run(self, arm: str, label: str, seconds: float, exit_code: int | None, stdout: str) -> ExperimentRun:
        entries, _ = read_log(os.path.join(arm, "shadow", EVENTS_LOG))
        installed = {e["pid"] for e in entries if e.get("op") == "installed"}
        self.unrouted_found += [d for e in entries if (d := _unrouted(e, installed, "an experiment run"))]
        self.unrouted = _grouped(self.unrouted_found)
        self.touched.update(e["path"] for e in entries if e.get("op") in ("write", "delete"))
        files, size = tree_size(os.path.join(arm, "shadow", "upper"))
        record = ExperimentRun(label=label, seconds=round(seconds, 3), exit_code=exit_code, shadow_files=files,
                               shadow_bytes=size, output_head=stdout[:OUTPUT_HEAD])
        self.runs.append(record)
        shutil.rmtree(arm, ignore_errors=True)
        return record

    def full(self, arm: str) -> str | None:
        """The shadow's own word when a run's writes did not fit it."""
        entries, _ = read_log(os.path.join(arm, "shadow", EVENTS_LOG))
        found = next((e for e in entries if e.get("op") == "full"), None)
        if found is None:
            return None
        return (f"the run's writes did not fit advisor's shadow of your files: {shown(found['path'], self.cwd)} "
                f"({found['size'] / 1e6:.1f} MB) would pass its {found['limit'] / 1e6:.1f} MB limit (--shadow-limit); "
                "your files are unchanged")

    def changed(self) -> tuple[int, list[str]]:
        """(paths checked, those the experiment runs changed): the audited run's paths and the working folder's
        entries against their state before the experiments; what the experiments wrote and the audited
        run did not, against the time they began."""
        changed = [shown(path, self.cwd) for path, state in self.before.items() if _state(path) != state]
        others = self.touched - set(self.before)
        for path in others:
            now = _state(path)
            if now and now[1] >= self.experiments_began_ns:
                changed.append(shown(path, self.cwd))
        return len(self.before) + len(others), sorted(set(changed))

    def record(self, stopped: str) -> FilesRecord:
        checked, changed = self.changed() if self.runs else (0, [])
        written = self.written()
        return FilesRecord(written=[c for c in written if c.change != "created and removed"],
                           temporary=sum(c.change == "created and removed" for c in written),
                           stopped=stopped, not_kept=self.not_kept(),
                           unrouted=self.audited_programs() + self.unrouted, experiment_runs=self.runs,
                           checked=checked, changed=changed)

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _unrouted(event: dict, installed: set[int], who: str) -> tuple[str, str] | None:
    """What a run did that its file layer could not follow: (the program or path it concerns, a sentence);
    None for the rest."""
    if event.get("op") == "unseen":
        return event["path"], f"{who} wrote {event['path']} {event['why']}: not followed"
    if event.get("op") != "subprocess" or event.get("child") in installed:
        return None  # a Python process that installed the layer itself is followed
    command, program = " ".join(event["argv"])[:200], os.path.basename(event["argv"][0]) if event["argv"] else "?"
    if event.get("child") is None:
        return program, (f"{who} started {command} ({event.get('how', 'a program')}): advisor cannot tell whether its "
                         "writes were followed")
    return program, f"{who} started {command}, which advisor's file layer does not reach: its writes are real"


def _grouped(found: list[tuple[str, str]]) -> list[str]:
    """One line per program (torch.compile's toolchain starts g++ dozens of times): its first sentence, and how
    many times in all."""
    first: dict[str, str] = {}
    counts: dict[str, int] = {}
    for key, sentence in found:
        first.setdefault(key, sentence)
        counts[key] = counts.get(key, 0) + 1
    return [sentence if counts[key] == 1 else f"{sentence} ({key}: {counts[key]} times in all)"
            for key, sentence in first.items()]


def _state(path: str) -> tuple | None:
    """(kind, modification time, size, inode) of a path, or None when it does not exist."""
    try:
        found = os.lstat(path)
    except OSError:
        return None
    return stat.S_IFMT(found.st_mode), found.st_mtime_ns, found.st_size, found.st_ino


def _same(stored: str | None, path: str) -> bool:
    """Whether the journal's copy is the path as it is now (the run opened it for writing, changed nothing)."""
    if not stored:
        return False
    try:
        kept, now = os.lstat(stored), os.lstat(path)
    except OSError:
        return False
    if (kept.st_dev, kept.st_ino) == (now.st_dev, now.st_ino):
        return True
    if not (stat.S_ISREG(kept.st_mode) and stat.S_ISREG(now.st_mode)) or kept.st_size != now.st_size:
        return False
    with open(stored, "rb") as first, open(path, "rb") as second:
        while True:
            a, b = first.read(1 << 20), second.read(1 << 20)
            if a != b:
                return False
            if not a:
                return True


def _size(path: str) -> int:
    if os.path.isdir(path) and not os.path.islink(path):
        return tree_size(path)[1]
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0
