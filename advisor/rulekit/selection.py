"""Which rules run: ``select`` and ``ignore`` as ruff takes them, by code (``ADV102``), code prefix (``ADV1``), slug
(``host-sync``) or ``ALL``, from the command line or ``[tool.advisor]``. A name that matches no rule is an error
naming where it was written."""

from __future__ import annotations

from typing import Iterable

from advisor.rulekit.thresholds import SettingError


def matching(rules: Iterable, names: Iterable[str], where: str) -> set[str]:
    """The slugs of the rules ``names`` name; SettingError for a name that names none."""
    rules = list(rules)
    found: set[str] = set()
    for name in (n.strip() for n in names):
        if not name:
            continue
        hits = {r.slug for r in rules if name in ("ALL", r.slug) or (name.isupper() and r.code.startswith(name))}
        if not hits:
            raise SettingError(f"{where}: no rule named or coded {name!r} (see 'advisor rules')")
        found |= hits
    return found


def turned_off(rules: Iterable, select: Iterable[str], ignore: Iterable[str], where: str) -> set[str]:
    """The rules left out: those ``select`` does not name (when it names any), and those ``ignore`` names."""
    rules = list(rules)
    select = [name for name in select if name.strip()]
    off = {r.slug for r in rules} - matching(rules, select, f"{where} select") if select else set()
    return off | matching(rules, ignore, f"{where} ignore")
