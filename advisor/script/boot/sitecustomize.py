"""advisor's bootstrap, imported by Python at start-up because advisor put this folder on PYTHONPATH.

- ``ADVISOR_FILES``: in every Python process of the run (the script, torchrun's launcher and ranks,
  spawned workers, Python subprocesses), the file layer is installed before anything else runs: the
  audited run's journal, or an experiment run's shadow (``advisor.files``).
- ``ADVISOR_RUN_SPEC``: in the first process that imports this (the script; not DataLoader workers or
  other children), advisor's step window. Under torchrun the first process is the launcher: it is left
  alone, and each of its workers (a rank) gets its own window.

Neither does anything in a process that was not started by advisor.
"""

import os
import sys

LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def _torchrun_launcher() -> bool:
    """``torchrun ...`` or ``python -m torch.distributed.run ...`` (whose sys.argv, this early, does not
    name the module yet: sys.orig_argv does)."""
    if sys.argv and os.path.basename(sys.argv[0]) == "torchrun":
        return True
    given = list(getattr(sys, "orig_argv", ()))
    return "-m" in given[:-1] and given[given.index("-m") + 1] in LAUNCHER_MODULES


if os.environ.get("ADVISOR_FILES"):
    try:
        from advisor.files.activate import activate_from_environment

        activate_from_environment()
    except Exception as failure:  # noqa: BLE001
        print(f"advisor: the file layer could not be installed: {failure}", file=sys.stderr)
        if os.environ.get("ADVISOR_FILES_REQUIRED"):
            os._exit(70)  # an experiment run never touches the user's files: without its shadow it does not run
        # the audited run goes on (it is the user's run); the parent sees no journal and runs no experiment

if os.environ.get("ADVISOR_RUN_SPEC") and not os.environ.get("ADVISOR_RUN_OWNER") and not _torchrun_launcher():
    os.environ["ADVISOR_RUN_OWNER"] = str(os.getpid())  # children inherit it and stay untouched
    try:
        from advisor.script.window import prepare

        prepare(os.environ["ADVISOR_RUN_SPEC"])
    except Exception as failure:  # noqa: BLE001 - never break the user's script
        print(f"advisor: the run bootstrap could not be installed: {failure}", file=sys.stderr)
