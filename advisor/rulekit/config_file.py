"""The ``[tool.advisor]`` table of a ``pyproject.toml``: found from the audited file or script up, read and checked.
The command line's reading of it (flags winning over the file) is ``cli/config.py``'s; a training callback reads it
here through ``RuleConfig.from_file``."""

from __future__ import annotations

import os
import tomllib

from advisor.rulekit.thresholds import SettingError

KEYS = ("select", "ignore", "extend-ignore", "fail-on", "budget", "set", "per-file-ignores", "docs-url")


def find_config(start: str) -> str:
    """The nearest pyproject.toml with a [tool.advisor] table, from ``start``'s folder up; empty when none."""
    folder = os.path.dirname(os.path.abspath(start)) if not os.path.isdir(start) else os.path.abspath(start)
    while True:
        candidate = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(candidate) and "advisor" in _read(candidate).get("tool", {}):
            return candidate
        parent = os.path.dirname(folder)
        if parent == folder:
            return ""
        folder = parent


def _read(path: str) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as bad:
        raise SettingError(f"{path}: cannot be read as TOML ({bad})") from None


def table(path: str) -> dict:
    """``path``'s [tool.advisor], its keys and their types checked."""
    found = _read(path).get("tool", {}).get("advisor", {})
    unknown = sorted(set(found) - set(KEYS))
    if unknown:
        raise SettingError(f"{path}: [tool.advisor] has no setting {', '.join(map(repr, unknown))} "
                           f"(it takes: {', '.join(KEYS)})")
    for key in ("select", "ignore", "extend-ignore"):
        if not isinstance(found.get(key, []), list) or not all(isinstance(n, str) for n in found.get(key, [])):
            raise SettingError(f"{path}: [tool.advisor] {key} is a list of rule codes or slugs")
    if not isinstance(found.get("set", {}), dict) or not isinstance(found.get("per-file-ignores", {}), dict):
        raise SettingError(f"{path}: [tool.advisor] set and per-file-ignores are tables")
    if not isinstance(found.get("docs-url", ""), str):
        raise SettingError(f"{path}: [tool.advisor] docs-url is the address of advisor's documentation site")
    return found


def rule_settings(found: dict) -> dict:
    """A [tool.advisor] table's rule settings in the shapes ``RuleConfig.load`` takes (``extend_ignore`` apart: the
    command line replaces ``ignore`` but adds to it)."""
    return {"select": tuple(found.get("select", ())), "ignore": tuple(found.get("ignore", ())),
            "extend_ignore": tuple(found.get("extend-ignore", ())),
            "settings": tuple(f"{key}={value}" for key, value in found.get("set", {}).items()),
            "per_file_ignores": tuple((pattern, tuple(names)) for pattern, names in
                                      found.get("per-file-ignores", {}).items()),
            "docs_url": found.get("docs-url", "")}
