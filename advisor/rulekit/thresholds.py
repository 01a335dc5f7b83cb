"""Named, documented knobs: every number a verdict rests on, settable with ``--set OWNER.NAME=VALUE``
(a rule's thresholds, the severity scale, the readiness limits)."""

from __future__ import annotations

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


def setting_value(setting: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise SettingError(f"--set {setting!r}: {raw!r} is not a number") from None


def with_settings(owner: str, declared: dict[str, Threshold], settings: list[str] | tuple[str, ...]) -> Thresholds:
    """``owner``'s thresholds with the ``--set owner.NAME=VALUE`` settings applied, each checked."""
    overrides = {}
    for setting in settings:
        key, sep, raw = setting.partition("=")
        named, dot, name = key.strip().partition(".")
        if not sep or not dot or named != owner or name not in declared:
            known = ", ".join(f"{owner}.{n}" for n in sorted(declared))
            raise SettingError(f"--set {setting!r}: expected one of {known}, =VALUE")
        overrides[name] = setting_value(setting, raw)
    return Thresholds.resolve(declared, overrides)
