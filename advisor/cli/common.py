"""What the command line's commands share: how a failure is said, and the option groups."""

from __future__ import annotations

import contextlib
import os
import sys
import traceback

import click

import advisor.cli.flags as flags
from advisor.cli.config import CONFIG_OPTIONS
from advisor.report.write import FORMATS

EXIT_FAILED = 2


def fail(message: str, debug: bool = False) -> None:
    click.echo(f"advisor: {message}", err=True)
    if debug:
        traceback.print_exc()
    sys.exit(EXIT_FAILED)


def formats_of(value: str) -> tuple[str, ...]:
    """The formats asked for; with ``--out -`` and no ``--format``, JSON alone (one format goes to stdout)."""
    context = click.get_current_context(silent=True)
    if context is not None and context.params.get("out_dir") == "-":
        source = context.get_parameter_source("formats")
        if source is not None and source.name == "DEFAULT":
            value = "json"
    chosen = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise click.BadParameter(f"expected a comma-separated subset of {','.join(FORMATS)}; got {value!r}")
    if context is not None and context.params.get("out_dir") == "-" and len(chosen) != 1:
        raise click.BadParameter(f"--out - prints one format to stdout, not {value!r}", param_hint="'--format'")
    return chosen


def report_options(command):
    """The options audit, run and analyze share: where reports go, which rules, when to fail."""
    for option in reversed([flags.out(), flags.FORMAT, flags.RULES, flags.settings(), flags.DISABLE, flags.fail_on(),
                            *CONFIG_OPTIONS]):
        command = option(command)
    return command


def model_file_options(command):
    """The options of the commands that run a model file (audit, fix): how it runs and is measured."""
    for option in reversed([
        flags.mode("auto: train when the file defines get_optimizer, else inference."),
        flags.DEVICE, flags.timeout(), flags.verify("Measure the fixes (audit) or the patched source (fix)."),
        flags.budget(), flags.pairs(), flags.SHADOW_LIMIT, flags.QUIET, flags.DEBUG,
    ]):
        command = option(command)
    return command


def check_model_file(model_file: str) -> None:
    if not os.path.isfile(model_file):
        fail(no_such_file(model_file, "pass the path of a model file defining get_model() and get_inputs()"))
    if not model_file.endswith(".py"):
        fail(f"{model_file}: not a Python file; a model file is a .py file defining get_model() and get_inputs()")


def no_such_file(path: str, instead: str) -> str:
    """The one way a missing file is said: its path, and what the command expected."""
    return f"{path}: no such file; {instead}"


def summarize(report, written: dict[str, str]) -> None:
    """The terminal summary: on stderr where the report itself went to stdout (``--out -``)."""
    from advisor.report.terminal import print_summary
    from advisor.report.write import STDOUT

    to_stderr = STDOUT in written.values()
    with contextlib.redirect_stdout(sys.stderr) if to_stderr else contextlib.nullcontext():
        print_summary(report, {} if to_stderr else written)
        context = click.get_current_context(silent=True)
        if context is not None and context.meta.get("advisor.show_suppressed"):
            for kept in report.suppressed:
                click.echo(f"  suppressed {kept.finding.code} {kept.finding.slug} by {kept.by}: {kept.finding.message}")
