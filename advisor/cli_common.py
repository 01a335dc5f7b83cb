"""What the command line's commands share: how a failure is said, and the option groups."""

from __future__ import annotations

import os
import sys
import traceback

import click

from advisor.report.write import FORMATS
from advisor.rulekit.rule import Severity

EXIT_FAILED = 2
PAIRS_HELP = ("Measure each fix with exactly N interleaved baseline/candidate pairs, however long it takes, "
              "instead of within --budget (the same work on any machine, for CI).")
SHADOW_LIMIT_HELP = ("Most an experiment run's shadow of your files may hold, and the copies kept of what the audited "
                     "run changes [default: a third of the scratch folder's free space].")


def fail(message: str, debug: bool = False) -> None:
    click.echo(f"advisor: {message}", err=True)
    if debug:
        traceback.print_exc()
    sys.exit(EXIT_FAILED)


def formats_of(value: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in value.split(",") if part.strip())
    unknown = [f for f in chosen if f not in FORMATS]
    if unknown or not chosen:
        raise click.BadParameter(f"expected a comma-separated subset of {','.join(FORMATS)}; got {value!r}")
    return chosen


def report_options(command):
    """The options audit and analyze share: where reports go, which rules, when to fail."""
    for option in reversed([
        click.option("--out", "out_dir", default="reports", show_default=True, help="Folder for the reports."),
        click.option("--format", "formats", default="html,json", show_default=True,
                     help="Comma-separated: html,json,md,sarif."),
        click.option("--rules", "rule_dirs", multiple=True, type=click.Path(), help="Extra folder of rule files."),
        click.option("--set", "settings", multiple=True, metavar="SLUG.THRESHOLD=VALUE", help="Override a threshold."),
        click.option("--disable", "disabled", multiple=True, metavar="SLUG", help="Turn a rule off."),
        click.option("--fail-on", type=click.Choice([s.value for s in Severity]), default="high", show_default=True,
                     help="Exit 1 when a finding is at or above this severity."),
    ]):
        command = option(command)
    return command


def model_file_options(command):
    """The options of the commands that run a model file (audit, fix): how it runs and is measured."""
    for option in reversed([
        click.option("--mode", type=click.Choice(["auto", "train", "inference"]), default="auto", show_default=True,
                     help="auto: train when the file defines get_optimizer, else inference."),
        click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N]."),
        click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True,
                     help="Seconds each stage may run before it is stopped."),
        click.option("--verify/--no-verify", default=True, help="Measure the fixes (audit) or the patched source (fix)."),
        click.option("--budget", type=click.FloatRange(min=0), default=120, show_default=True,
                     help="Seconds for measuring fixes."),
        click.option("--pairs", type=click.IntRange(min=2), default=None, metavar="N", help=PAIRS_HELP),
        click.option("--shadow-limit", "shadow_limit", type=click.FloatRange(min=0, min_open=True), default=None,
                     metavar="MB", help=SHADOW_LIMIT_HELP),
        click.option("--quiet", is_flag=True, help="No progress on stderr."),
        click.option("--debug", is_flag=True, help="Show tracebacks of failures."),
    ]):
        command = option(command)
    return command


def check_model_file(model_file: str) -> None:
    if not os.path.isfile(model_file):
        fail(f"{model_file}: no such file; pass the path of a model file defining get_model() and get_inputs()")
    if not model_file.endswith(".py"):
        fail(f"{model_file}: not a Python file; a model file is a .py file defining get_model() and get_inputs()")
