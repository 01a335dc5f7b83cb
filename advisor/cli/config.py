"""``[tool.advisor]`` in the nearest ``pyproject.toml`` above the audited file or script (or ``--config FILE``), as
ruff reads ``[tool.ruff]``: which rules (``select``, ``ignore``, ``extend-ignore``, ``per-file-ignores``), when to
fail (``fail-on``), the verification's ``budget``, thresholds (``set``, the ``--set`` names) and where the rules'
pages are published (``docs-url``, for SARIF's ``helpUri``). A flag given on the command line wins over the file;
``--extend-ignore`` adds to the file's ``ignore``.

    [tool.advisor]
    ignore = ["gc-pauses"]
    fail-on = "medium"
    set = { "host-sync.min_per_step" = 3 }
    per-file-ignores = { "scripts/*.py" = ["ADV110"] }
"""

from __future__ import annotations

import dataclasses
import os

import click

from advisor.rulekit.config_file import find_config, rule_settings, table
from advisor.rulekit.thresholds import SettingError


def configured(options, subject: str):
    """``options`` with the configuration file's values where the command line gave none."""
    context = click.get_current_context()
    given = context.meta.get("advisor.config") or ""
    path = os.path.abspath(given) if given else find_config(subject)
    if given and not os.path.isfile(path):
        raise SettingError(f"{given}: no such configuration file")
    found = table(path) if path else {}

    def from_command_line(name: str) -> bool:
        source = context.get_parameter_source(name)
        return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")

    meta, from_file = context.meta, rule_settings(found)
    update = {"config_file": path,
              "select": tuple(meta.get("advisor.select") or from_file["select"]),
              "ignore": tuple(meta.get("advisor.ignore") or from_file["ignore"])
              + tuple(meta.get("advisor.extend_ignore", ())) + from_file["extend_ignore"],
              "settings": from_file["settings"] + options.settings,
              "per_file_ignores": from_file["per_file_ignores"], "docs_url": from_file["docs_url"]}
    if "fail-on" in found and not from_command_line("fail_on"):
        update["fail_on"] = str(found["fail-on"])
    if "budget" in found and hasattr(options, "budget") and not from_command_line("budget"):
        update["budget"] = float(found["budget"])
    return dataclasses.replace(options, **update)


def _remember(key: str):
    def store(context: click.Context, parameter: click.Parameter, value):
        if value is True:
            context.meta[key] = True
        elif value:
            names = value if isinstance(value, str) else ",".join(value)
            context.meta[key] = names if key == "advisor.config" else tuple(
                n.strip() for n in names.split(",") if n.strip())
        return value
    return store


CONFIG_OPTIONS = (
    click.option("--config", type=click.Path(dir_okay=False), expose_value=False, callback=_remember("advisor.config"),
                 help="The pyproject.toml whose [tool.advisor] to read [default: the nearest one above the file]."),
    click.option("--select", multiple=True, expose_value=False, callback=_remember("advisor.select"),
                 metavar="CODES", help="Only these rules (codes, code prefixes or slugs, comma-separated)."),
    click.option("--ignore", multiple=True, expose_value=False, callback=_remember("advisor.ignore"),
                 metavar="CODES", help="Leave these rules out (instead of the file's ignore)."),
    click.option("--extend-ignore", multiple=True, expose_value=False, callback=_remember("advisor.extend_ignore"),
                 metavar="CODES", help="Leave these rules out too (beside the file's ignore)."),
    click.option("--show-suppressed", is_flag=True, expose_value=False, callback=_remember("advisor.show_suppressed"),
                 help="List the findings a '# noqa' or per-file-ignores suppressed."),
)


def config_options(command):
    """--config, --select, --ignore, --extend-ignore and --show-suppressed on a command that runs rules."""
    for option in reversed(CONFIG_OPTIONS):
        command = option(command)
    return command
