"""Every option more than one command takes, declared once: a decorator, or a function of what differs between
the commands (what a folder holds, what a timeout stops, which severities fail). ``tests/test_structure.py``
holds that no option is declared twice."""

from __future__ import annotations

import click

from advisor.rulekit.rule import Severity

PAIRS_HELP = ("Measure each fix with exactly N interleaved baseline/candidate pairs, however long it takes, "
              "instead of within --budget (the same work on any machine, for CI).")
SHADOW_LIMIT_HELP = ("Most an experiment run's shadow of your files may hold, and the copies kept of what the audited "
                     "run changes [default: a third of the scratch folder's free space].")

DEBUG = click.option("--debug", is_flag=True, help="Show tracebacks of failures.")
QUIET = click.option("--quiet", is_flag=True, help="No progress on stderr.")
RULES = click.option("--rules", "rule_dirs", multiple=True, type=click.Path(), help="Extra folder of rule files.")
DISABLE = click.option("--disable", "disabled", multiple=True, metavar="SLUG", help="Turn a rule off.")
FORMAT = click.option("--format", "formats", default="html,json", show_default=True,
                      help="Comma-separated: html,json,md,sarif.")
DEVICE = click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda[:N].")
SHADOW_LIMIT = click.option("--shadow-limit", "shadow_limit", type=click.FloatRange(min=0, min_open=True), default=None,
                            metavar="MB", help=SHADOW_LIMIT_HELP)


def out(holds: str = "the reports", default: str = "reports", dest: str = "out_dir", **kind):
    return click.option("--out", dest, default=default, show_default=True, help=f"Folder for {holds}.", **kind)


def settings(metavar: str = "SLUG.THRESHOLD=VALUE", help: str = "Override a threshold."):
    return click.option("--set", "settings", multiple=True, metavar=metavar, help=help)


def timeout(stops: str = "Seconds each stage may run before it is stopped."):
    return click.option("--timeout", type=click.FloatRange(min=1), default=300, show_default=True, help=stops)


def budget(help: str = "Seconds for measuring fixes.", default: float = 120, least: float = 0):
    return click.option("--budget", type=click.FloatRange(min=least), default=default, show_default=True, help=help)


def pairs(help: str = PAIRS_HELP):
    return click.option("--pairs", type=click.IntRange(min=2), default=None, metavar="N", help=help)


def verify(help: str):
    return click.option("--verify/--no-verify", default=True, help=help)


def mode(help: str):
    return click.option("--mode", type=click.Choice(["auto", "train", "inference"]), default="auto",
                        show_default=True, help=help)


def fail_on(choices: list[str] | None = None, default: str | None = "high",
            help: str = "Exit 1 when a finding is at or above this severity."):
    return click.option("--fail-on", type=click.Choice(choices or [s.value for s in Severity]), default=default,
                        show_default=default is not None, help=help)
