"""Named, documented knobs: every number a verdict rests on, settable with ``--set OWNER.NAME=VALUE``
(a rule's thresholds, the severity scale, the readiness limits)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    """A named, documented knob, overridable with ``--set owner.name=value``."""

    default: float
    help: str
    unit: str = ""


class Thresholds(dict):
    """Resolved values of one owner's thresholds; read as attributes (``th.min_share``)."""

    def __getattr__(self, name: str) -> float:
        try:
            return self[name]
        except KeyError as missing:
            raise AttributeError(f"no threshold named {name!r}") from missing

    @classmethod
    def resolve(cls, declared: dict[str, Threshold], overrides: dict[str, float] | None = None) -> Thresholds:
        values = cls({name: threshold.default for name, threshold in declared.items()})
        values.update(overrides or {})
        return values


class SettingError(ValueError):
    """A --set or --disable names a rule or threshold that does not exist, or a bad value."""


# a threshold whose name holds one of these is a part of a whole (of the step, of the clock, of the work)
SHARE_WORDS = ("share", "fraction", "busy", "clock_ratio")


def is_share(name: str) -> bool:
    return any(word in name for word in SHARE_WORDS)


def setting_value(setting: str, raw: str, name: str) -> float:
    """The value of ``--set ...NAME=RAW``: a finite number, not negative, and within 0..1 for a share (a share of
    1.2 would silence its rule on every run without saying so)."""
    try:
        value = float(raw)
    except ValueError:
        raise SettingError(f"--set {setting!r}: {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise SettingError(f"--set {setting!r}: a threshold is a finite number of at least 0, not {raw!r}")
    if is_share(name) and value > 1:
        raise SettingError(f"--set {setting!r}: {name} is a share, between 0 and 1 (0.2 is a fifth), not {raw!r}")
    return value


def with_settings(owner: str, declared: dict[str, Threshold], settings: list[str] | tuple[str, ...]) -> Thresholds:
    """``owner``'s thresholds with the ``--set owner.NAME=VALUE`` settings applied, each checked."""
    overrides = {}
    for setting in settings:
        key, sep, raw = setting.partition("=")
        named, dot, name = key.strip().partition(".")
        if not sep or not dot or named != owner or name not in declared:
            known = ", ".join(f"{owner}.{n}" for n in sorted(declared))
            raise SettingError(f"--set {setting!r}: expected one of {known}, =VALUE")
        overrides[name] = setting_value(setting, raw, name)
    return Thresholds.resolve(declared, overrides)
