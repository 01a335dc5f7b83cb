"""advisor's bootstrap, imported by Python at start-up because ``advisor run`` put this folder on
PYTHONPATH. It does nothing unless ADVISOR_RUN_SPEC is set, and only in the first process that
imports it (the script; not DataLoader workers or other children). Under torchrun the first
process is the launcher: it is left alone, and each of its workers (a rank) gets its own window.
Once the script imports torch, advisor's step window is installed. Nothing is written into the
user's files."""

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


if os.environ.get("ADVISOR_RUN_SPEC") and not os.environ.get("ADVISOR_RUN_OWNER") and not _torchrun_launcher():
    os.environ["ADVISOR_RUN_OWNER"] = str(os.getpid())  # children inherit it and stay untouched
    try:
        from advisor.run.window import install_when_torch_loads

        install_when_torch_loads(os.environ["ADVISOR_RUN_SPEC"])
    except Exception as failure:  # noqa: BLE001 - never break the user's script
        print(f"advisor: the run bootstrap could not be installed: {failure}", file=sys.stderr)
