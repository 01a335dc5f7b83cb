"""What went wrong in a torchrun job, rank by rank: the exception that ended a rank, where each rank
waited when the job hung (from the stacks faulthandler wrote on SIGUSR1), and a job that never
initialised a process group."""

from __future__ import annotations

import os

from advisor.errors import StageError
from advisor.run.launch import ScriptRun
from advisor.sources import frames_in, is_library_path


def rank_failures(run: ScriptRun, script: str, errors: list[StageError], notes: list[str]) -> None:
    crashes = sorted((c for f in run.rank_folders.values() if (c := run.read("crash.json", f)) is not None),
                     key=lambda crash: crash["time"])
    if crashes:
        first, *after = crashes  # the first to fail is the cause; the others fail on its closed connections
        message = f"rank {first['rank']} failed: {first['error']}"
        if after:
            message += "; then " + "; ".join(f"rank {c['rank']} failed too ({c['error'].splitlines()[0][:160]})"
                                            for c in after)
        message += "; what every rank measured until then is reported"
        # "the script ended early" or "failed" says less than this
        errors[:] = [e for e in errors if e.stage != "load" and (e.stage, e.kind) != ("script", "user-code")]
        errors.append(StageError(stage="script", kind="user-code", file=first["file"], line=first["line"],
                                 code=first["code"], message=message))
    if run.timed_out and (hang := describe_hang(run)):
        errors[:] = [e for e in errors if e.kind != "timeout"]
        errors.append(StageError(stage="timing", kind="timeout", message=hang))
    windows = [run.read("window.json", folder) for folder in run.rank_folders.values()]
    if windows and not any(window and window.get("distributed") for window in windows):
        notes.append(f"run under torchrun, but the script never initialised a process group: each of its "
                     f"{len(windows)} processes was audited as a single process, and the report is rank 0's")


def describe_hang(run: ScriptRun) -> str:
    """"the job hung in all_reduce: rank 0 waits there (train.py:40); rank 1 did not arrive (at train.py:52)"."""
    waiting, elsewhere = [], []
    for rank, folder in run.rank_folders.items():
        path = os.path.join(folder, "stacks.txt")
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as handle:
            collective, place = where_waiting(handle.read())
        if place is None:
            continue
        (waiting if collective else elsewhere).append((rank, collective, place))
    if not waiting:
        return ""
    collective = waiting[0][1]
    text = f"the job hung in {collective}: " + "; ".join(f"rank {r} waits there ({p})" for r, _, p in waiting)
    if elsewhere:
        text += "; " + "; ".join(f"rank {r} did not arrive (it is at {p})" for r, _, p in elsewhere)
    return text


def where_waiting(stacks: str) -> tuple[str | None, str | None]:
    """(the collective a main-thread stack waits in, or None; the user's innermost line)."""
    thread = stacks.split("\n\n")[0]  # faulthandler writes the current thread first, most recent call first
    collective, place = None, None
    for file, line_number, function, _ in frames_in(thread):
        if collective is None and place is None and "torch/distributed/" in file and not function.startswith("_"):
            collective = function
        elif collective is None and place is None and file.endswith("torch/autograd/graph.py"):
            collective = "backward (DDP's gradient all-reduce)"
        if place is None and not is_library_path(file):
            place = f"{os.path.basename(file)}:{line_number} in {function}"
    return collective, place
