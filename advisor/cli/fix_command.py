"""``advisor fix MODEL_FILE`` and ``advisor fix -- python train.py [args]``: the command line of the patch
writer (advisor.commands.fix)."""

from __future__ import annotations

import os
import sys

import click

import advisor.cli.flags as flags
from advisor.assembly.build import failed
from advisor.cli.common import check_model_file, fail, model_file_options
from advisor.cli.config import config_options, configured
from advisor.errors import stop_name
from advisor.report.terminal import print_problems
from advisor.rulekit.thresholds import SettingError


@click.command()
@click.argument("target", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option("--from", "from_report", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Reuse the findings of this audit's JSON report instead of auditing again.")
@click.option("--unsafe-fixes", "unsafe", is_flag=True, help="Also make edits that change results by design.")
@click.option("--apply", "apply_edits", is_flag=True,
              help="Write the held edits into the source files (after the re-audit; originals kept as .advisor-orig).")
@flags.out("the patch and its report")
@flags.RULES
@flags.settings()
@flags.DISABLE
@config_options
@model_file_options
def fix(target, from_report, unsafe, apply_edits, out_dir, rule_dirs, settings, disabled, mode, device, timeout,
        verify, budget, pairs, shadow_limit, quiet, debug) -> None:
    """Write the findings' fixes as a patch to the source, re-audited on a scratch copy: TARGET is a model
    file, or after -- the command that runs a script (advisor fix -- python train.py --lr 0.1)."""
    command: tuple[str, ...] = ()
    if len(target) == 1:
        model_file = target[0]
        check_model_file(model_file)
    else:
        command = tuple(target)
        model_file = next((part for part in command if part.endswith(".py")), "")
        if not model_file or not os.path.isfile(model_file):
            fail(f"{' '.join(command)}: no Python script in the command (advisor fix -- python train.py)")
    from advisor.commands.fix import FixOptions, run_fix
    from advisor.patch.summary import print_patch, write_patch

    options = FixOptions(model_file=model_file, command=command, from_report=from_report or "", unsafe=unsafe,
                         out_dir=out_dir,
                         rule_dirs=rule_dirs, settings=settings, disabled=disabled, mode=mode, device=device,
                         timeout=timeout, verify=verify, budget=budget, pairs=pairs, shadow_limit_mb=shadow_limit)
    progress = (lambda text: None) if quiet else (lambda text: click.echo(f"[advisor] {text}", err=True))
    try:
        options = configured(options, model_file)
        result = run_fix(options, progress)
        written = write_patch(result.report, result.patch, out_dir, os.path.splitext(os.path.basename(model_file))[0])
        if apply_edits:
            if not verify:
                raise ValueError("--apply writes only re-audited edits, and --no-verify skips the re-audit")
            from advisor.patch.apply import apply_patch

            written["applied"] = ", ".join(apply_patch(result.plan))
    except SettingError as bad:
        fail(str(bad), debug)
    except KeyboardInterrupt as interruption:
        fail(f"{model_file}: interrupted ({stop_name(interruption)}); the source files were not changed", debug)
    except (OSError, ValueError) as refused:
        fail(f"{model_file}: {refused}; no source file was changed", debug)
    except Exception as unexpected:  # noqa: BLE001 - a clear line, not a traceback
        fail(f"{model_file}: internal error in advisor: {type(unexpected).__name__}: {unexpected}", debug)
    if failed(result.report):  # the audit itself did not run (a file that does not load): nothing was patched
        print_problems(result.report, model_file, debug)
        fail(f"{model_file}: the audit did not complete, so no fix was planned; no source file was changed", debug)
    print_patch(result.report, result.patch, written)
    sys.exit(0)
