"""Failures a user sees: one paragraph naming the file, the stage and the cause."""

from __future__ import annotations

import linecache
import os
import traceback
from types import TracebackType

from advisor.records import Record
from advisor.sources import is_library_path


class StageError(Record):
    """What went wrong in one stage, in the user's terms; goes into the report."""

    stage: str
    kind: str  # user-code | timeout | crash | unsupported | internal | interrupted
    message: str
    file: str = ""
    line: int = 0
    code: str = ""
    detail: str = ""  # the full traceback, shown only with --debug

    def paragraph(self, model_file: str) -> str:
        where = f" ({self.file}:{self.line}: {self.code.strip()})" if self.file and self.line else ""
        return f"{model_file}: the {self.stage} stage failed{where}: {self.message}"


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP to advisor, handled as Ctrl-C is: the stop is passed on, the partial report written."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


def stop_name(interruption: BaseException) -> str:
    return getattr(interruption, "signal_name", "Ctrl-C")


def stop_on_signals() -> None:
    """From now on SIGTERM and SIGHUP raise ``Interrupted`` in the main thread, as Ctrl-C raises
    KeyboardInterrupt (``timeout 20 advisor run ...`` must end the job, not orphan it)."""
    import signal

    def interrupted(signum, frame):
        raise Interrupted(signal.Signals(signum).name)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)


class AuditError(Exception):
    """Raised inside advisor when a stage cannot go on; carries the StageError to report."""

    def __init__(self, error: StageError):
        super().__init__(error.message)
        self.error = error


def user_location(tb: TracebackType | None, prefer_file: str | None = None) -> tuple[str, int, str]:
    """Innermost traceback frame in ``prefer_file``, else in any non-library file."""
    frames = traceback.extract_tb(tb) if tb is not None else []
    preferred = os.path.abspath(prefer_file) if prefer_file else None
    chosen = None
    for frame in reversed(frames):
        if preferred and os.path.abspath(frame.filename) == preferred:
            chosen = frame
            break
    if chosen is None:
        for frame in reversed(frames):
            if not is_library_path(frame.filename):
                chosen = frame
                break
    if chosen is None:
        return "", 0, ""
    code = chosen.line or linecache.getline(chosen.filename, chosen.lineno or 0).strip()
    return chosen.filename, chosen.lineno or 0, code


def from_exception(stage: str, exc: BaseException, model_file: str, doing: str = "") -> StageError:
    """Describe an exception raised while running user code in ``stage``."""
    if isinstance(exc, AuditError):
        return exc.error
    detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if isinstance(exc, SyntaxError) and exc.filename:
        return StageError(
            stage=stage, kind="user-code", file=exc.filename, line=exc.lineno or 0,
            code=(exc.text or "").strip(), message=f"SyntaxError: {exc.msg}", detail=detail,
        )
    file, line, code = user_location(exc.__traceback__, model_file)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    summary = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    if doing:
        summary = f"{doing} raised {summary}"
    return StageError(
        stage=stage, kind="user-code" if file else "internal", file=file, line=line, code=code,
        message=summary, detail=detail,
    )
