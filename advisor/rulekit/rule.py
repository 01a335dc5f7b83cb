"""What a rule author imports: the ``rule`` decorator, Finding, Fix, Location, Layer, Severity.

A rule is one function in one file::

    @rule(slug="host-sync", code="ADV101", layer=Layer.APPLICATION,
          thresholds={"min_per_step": Threshold(1, "syncs per step before it is reported")})
    def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
        ...
        yield Finding(message="...", locations=[...], fix=Fix(...))

The docstring of the module holds the rule's documentation: a title line, then the sections
*What it detects*, *Why it matters*, *How to fix* and *Example*. The engine fills in the
rule's slug, code, title and layer on every Finding it yields; a rule only states what it saw.
Rules read evidence; they never run the model.
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Literal

from advisor.evidence import Location, Margin
from advisor.evidence.memory_records import PeakMemoryAB
from advisor.machine.state import MeasurementConditions
from advisor.records import Field, Record
from advisor.rulekit.docs import RuleDoc, parse_doc
from advisor.rulekit.needs import NEEDS, unknown
from advisor.rulekit.severity import Severity
from advisor.rulekit.thresholds import Threshold, Thresholds

__all__ = ["Clean", "Finding", "Fix", "Layer", "Location", "Margin", "NotVerifiable", "Rule", "Severity", "Threshold", "Thresholds",
           "RuleRun", "Verification", "rule"]


class Clean(Record):
    """Why a silent rule found nothing where no one value decides it (a ``Margin`` does that): what it looked
    for is absent ("anomaly detection is off"), or does not apply here ("no GPU in this run")."""

    why: str


class Layer(str, enum.Enum):
    """Where latency hides, in the order a report presents them."""

    HARDWARE = "hardware"
    RUNTIME = "runtime-libraries"
    MODEL = "model"
    APPLICATION = "application"

    @property
    def title(self) -> str:
        return _LAYER_TITLES[self]


_LAYER_TITLES = {
    Layer.HARDWARE: "Hardware and drivers",
    Layer.RUNTIME: "CUDA runtime and libraries",
    Layer.MODEL: "The model's implementation",
    Layer.APPLICATION: "The application: data, syncs, checkpoints",
}


class Fix(Record):
    summary: str
    before: str = ""
    after: str = ""
    docs: list[str] = Field(default_factory=list)


VerificationStatus = Literal[
    "verified", "no-gain", "slower", "inconclusive", "numerics-failed", "fix-failed", "not-verifiable-here", "skipped"]


class Verification(Record):
    """What measuring a finding's fix on a copy of the target showed."""

    status: VerificationStatus
    speedup: float | None = Field(default=None, description="median baseline/candidate step-time ratio")
    ci_low: float | None = Field(default=None, description="bootstrap 95% interval of the ratio, low end")
    ci_high: float | None = None
    baseline_ms: float | None = None
    candidate_ms: float | None = None
    timed: Literal["step", "block", "run", "run with data", "loader chunk"] = Field(
        default="step", description="what one sample times: a step (the median of steps is comparable with the "
                                    "timing stage's), a block's mean step (the fix switched inside one run of a "
                                    "script), a run's mean step (with its data wait), or a chunk of batches")
    samples: int = Field(default=0, description="interleaved baseline/candidate pairs measured")
    resolves: float | None = Field(default=None, description="the power of the pairs: the smallest speedup (or "
                                                             "slowdown) an interval this wide would have decided")
    max_abs_error: float | None = None
    max_rel_error: float | None = Field(default=None, description="max abs error over the baseline's max magnitude")
    tolerance: float | None = None
    compile_s: float | None = Field(default=None, description="one-off compile time of the candidate")
    device: str = ""
    note: str = ""
    conditions: MeasurementConditions | None = Field(default=None, description="the machine while the pairs ran")
    memory: PeakMemoryAB | None = Field(default=None, description="a memory fix's measurement: each side's peak, and "
                                                                   "what the fix costs the step's time (no speedup)")
    source_patch: bool = Field(default=False, description="measured as the rule's edit of the source: the patched "
                                                          "copy of the model file against the original")

    @property
    def rejected(self) -> bool:
        return self.status in ("slower", "numerics-failed", "fix-failed")


class SourceEdit(Record):
    """What ``advisor fix`` made of a finding's fix in the user's source, and what its re-audit showed."""

    status: Literal["patched", "not patched", "unsafe", "dropped"] = Field(
        description="patched: in the patch; not patched: no certain place (reason); unsafe: needs --unsafe-fixes; "
                    "dropped: the re-audit did not hold it (reason)")
    file: str = ""
    lines: tuple[int, int] = (0, 0)
    safe: bool = True
    what: str = ""
    reason: str = ""
    diff: str = Field(default="", description="this edit alone, as a unified diff")
    verification: Verification | None = Field(default=None, description="the patched source against the original")
    cleared: bool | None = Field(default=None, description="the finding is gone from the patched source's audit")


class RuleRun(Record):
    """What one rule did on one run: fired, stayed silent (and how near its threshold it came), or was not
    run (the evidence it needs is missing, or it was disabled)."""

    slug: str
    status: Literal["fired", "silent", "not run", "disabled"]
    why: str = ""
    margin: Margin | None = None
    unreliable: str = Field(default="", description="why its margin may not hold on a quiet machine")


class Finding(Record):
    """One item of the checklist. Rules set what they saw; the engine sets who saw it."""

    id: str = Field(default="", description="stable within and across runs: the rule's code and where it points")
    slug: str = ""
    code: str = ""
    title: str = ""
    layer: Layer = Layer.MODEL
    severity: Severity | None = None
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)
    locations: list[Location] = Field(default_factory=list)
    fix: Fix | None = None
    impact: float | None = Field(
        default=None, description="share of step time this finding explains (0..1), when measurable"
    )
    verification: Verification | None = None
    edit: SourceEdit | None = Field(default=None, description="advisor fix: the fix as an edit of the source")
    demoted: str = Field(default="", description="why the finding was demoted to INFO after its fix was measured "
                                                 "(no gain, or slower); empty when it was not")
    severity_before_demotion: Severity | None = None
    margin: Margin | None = Field(default=None, description="the value that decided it against its threshold")
    unreliable: str = Field(default="", description="why the share this finding rests on may not hold on a quiet "
                                                    "machine (measured under contention); empty when it was quiet")


def expected_gain(finding: Finding) -> tuple[int, float]:
    """Sort key, most expected gain first: by severity, then by the share of the step the finding explains."""
    rank = finding.severity.rank if finding.severity is not None else -1
    return -rank, -(finding.impact or 0.0)


CheckFn = Callable[..., Iterator[Finding]]

SLUG_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
CODE_PATTERN = re.compile(r"^[A-Z]{2,5}[0-9]{3}$")


class NotVerifiable(Exception):
    """Raised by a fix that cannot be measured here; the message says why (e.g. needs CUDA)."""


@dataclass
class FixSpec:
    """A rule's fix, and what measuring it needs; decided without running anything where it can.

    ``apply(target, finding)`` returns a NEW Target; None for advice only. ``needs_cuda`` says why
    the change only shows on a CUDA device (measured there, reported as expected elsewhere);
    ``expected(finding)`` returns the reason a finding's fix cannot be measured, or None.
    """

    apply: Callable[..., Any] | None
    tolerance: float = 1e-5  # max |candidate - baseline| / max |baseline|; 1e-5 = same up to float reordering
    what: str = ""
    needs_cuda: str = ""
    expected: Callable[[Any], str | None] | None = None
    whole_runs: str = ""  # why the fix cannot be switched on and off between steps of one run of a script
    measures: Literal["time", "memory"] = "time"  # what the fix is for: the step's time, or its peak memory
    tolerance_of: Callable[[Any], float] | None = None  # a finding's own tolerance, where its fix varies with it

    def tolerance_for(self, finding: Any) -> float:
        return self.tolerance_of(finding) if self.tolerance_of is not None else self.tolerance

    def unmeasurable(self, finding: Any, device: str) -> str | None:
        """Why this finding's fix is reported as expected rather than measured, here; None to measure it."""
        if self.expected is not None and (reason := self.expected(finding)):
            return reason
        if self.needs_cuda and not device.startswith("cuda"):
            return f"{self.needs_cuda}; this run used {device}, not a CUDA device"
        if self.apply is None:
            return "no automatic fix for this rule; apply the fix by hand"
        return None


@dataclass(frozen=True)
class PatchSpec:
    """A rule's fix as an edit of the user's source (``@check.patch``): ``apply(source, finding)`` returns
    the changes (``advisor.patch.codemods``). ``safe``: the edit keeps results within the fix's tolerance;
    an unsafe one (eval mode, reduced precision) changes them by design and is made only when asked."""

    apply: Callable[..., Any]
    safe: bool = True
    what: str = ""
    through_loader: bool = False  # the edit changes a DataLoader: measured over real batches, data + step
    tolerance: float = 1e-5  # what the patched source may change, where the rule has no runtime fix to say it


@dataclass
class Rule:
    slug: str
    code: str
    layer: Layer
    severity: Severity
    check: CheckFn
    thresholds: dict[str, Threshold] = field(default_factory=dict)
    doc: str = ""
    source: str = ""
    fix_spec: FixSpec | None = None
    patch_spec: PatchSpec | None = None
    high_at: str = ""  # the threshold on the finding's measured share from which it is HIGH (else MEDIUM)
    needs: tuple[str, ...] = ()  # the evidence it reads (advisor.rulekit.needs): not run without it

    @functools.cached_property
    def docs(self) -> RuleDoc:
        return parse_doc(self.doc)

    @property
    def title(self) -> str:
        return self.docs.title or self.slug

    def fix(self, fn: Callable[..., Any] | None = None, *, tolerance: float = 1e-5, what: str = "",
            needs_cuda: str = "", expected: Callable[[Any], str | None] | None = None, whole_runs: str = "",
            measures: Literal["time", "memory"] = "time", tolerance_of: Callable[[Any], float] | None = None):
        """Register ``fix(target, finding) -> Target``, which makes findings verifiable.

        Use bare (``@check.fix``) or with the numerical tolerance the change allows
        (``@check.fix(tolerance=0.05, what="bf16 autocast")``). The fix returns a new Target
        (see ``advisor.rulekit.fixing``); it never mutates the one it is given. ``needs_cuda="why"``
        declares a change that only shows on a CUDA device; ``expected=fn(finding)`` returns the
        reason a finding cannot be measured (or None). Both are decided before any model runs.
        ``whole_runs="why"``: under ``advisor run`` the fix is measured in whole runs of the script, not
        switched between its steps (a cost that falls on some steps only). ``measures="memory"``: the fix lowers
        the step's peak memory, which its verification measures (with what it costs the step's time), not a
        speedup. ``tolerance_of=fn(finding)``: the finding's own tolerance, where its fix depends on the finding
        (``tolerance`` is then the most any allows).
        A fix may still raise NotVerifiable when the device it runs on lacks what it needs.
        """
        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            self.fix_spec = FixSpec(apply=function, tolerance=tolerance, what=what or function.__doc__ or "",
                                    needs_cuda=needs_cuda, expected=expected, whole_runs=whole_runs,
                                    measures=measures, tolerance_of=tolerance_of)
            return function
        return register(fn) if fn is not None else register

    def patch(self, fn: Callable[..., Any] | None = None, *, safe: bool = True, what: str = "",
              through_loader: bool = False, tolerance: float = 1e-5):
        """Register ``patch(source, finding) -> list[Change]``: the fix written into the user's source
        (``advisor fix``). Raise ``codemods.NoEdit`` where the place is not certain. ``safe=False`` for an
        edit that changes results by design (made only with --unsafe-fixes). A rule with no runtime fix (advice
        only) is verified by its safe patch where the entry point can run a patched copy (``patch_measured``),
        its results within ``tolerance``."""
        def register(function: Callable[..., Any]) -> Callable[..., Any]:
            self.patch_spec = PatchSpec(apply=function, safe=safe, what=what or (function.__doc__ or "").strip(),
                                        through_loader=through_loader, tolerance=tolerance)
            return function
        return register(fn) if fn is not None else register

    @property
    def patch_measured(self) -> bool:
        """The rule's fix is measured as its source patch (a patched copy against the original): it has no runtime
        fix, only advice, and a safe edit of the source."""
        return (self.patch_spec is not None and self.patch_spec.safe
                and (self.fix_spec is None or self.fix_spec.apply is None))

    def advice_only(self, reason: str | Callable[[Any], str]) -> Any:
        """Declare that findings are advised, never measured, and why (the same for each finding,
        or a function of the finding). Verification reports them as expected without running."""
        explain = reason if callable(reason) else (lambda finding: reason)
        self.fix_spec = FixSpec(apply=None, what="advice only", expected=explain)
        return reason

    def __call__(self, *args: Any, **kwargs: Any) -> Iterator[Finding]:
        return self.check(*args, **kwargs)


class RuleDefinitionError(ValueError):
    """A rule file declares something malformed; reported when the file is loaded."""


def rule(
    *,
    slug: str,
    code: str,
    layer: Layer,
    severity: Severity = Severity.MEDIUM,
    thresholds: dict[str, Threshold] | None = None,
    high_at: str = "",
    needs: tuple[str, ...] = (),
) -> Callable[[CheckFn], Rule]:
    """Declare a rule. The module's docstring is its documentation. ``severity`` is the default;
    ``high_at`` names the threshold on a finding's measured share from which it is HIGH (MEDIUM below);
    the engine decides every finding's severity from these (``advisor.rulekit.severity``). ``needs`` names
    the evidence the rule reads (``advisor.rulekit.needs``); where it is missing the rule is not run and
    the report says why. A check yields the Margin it held against its threshold before deciding, so a
    silent rule still reports how near it came; where no one value decides, a silent rule yields a
    ``Clean`` saying what it found absent or why it did not apply."""

    def register(check: CheckFn) -> Rule:
        module = sys.modules.get(check.__module__)
        doc = (getattr(module, "__doc__", None) or check.__doc__ or "").strip()
        source = getattr(module, "__file__", "") or ""
        _validate(slug, code, layer, severity, thresholds or {}, check, doc)
        if high_at and high_at not in (thresholds or {}):
            raise RuleDefinitionError(f"rule {slug}: high_at={high_at!r} names no threshold of the rule")
        if bad := unknown(tuple(needs)):
            raise RuleDefinitionError(f"rule {slug}: needs names unknown evidence {bad} (known: {sorted(NEEDS)})")
        return Rule(
            slug=slug,
            code=code,
            layer=Layer(layer),
            severity=Severity(severity),
            check=check,
            thresholds=dict(thresholds or {}),
            doc=doc,
            source=source,
            high_at=high_at,
            needs=tuple(needs),
        )

    return register


def _validate(slug, code, layer, severity, thresholds, check, doc) -> None:
    if not SLUG_PATTERN.match(slug or ""):
        raise RuleDefinitionError(f"slug {slug!r} is not lower-case words joined by '-'")
    if not CODE_PATTERN.match(code or ""):
        raise RuleDefinitionError(f"rule {slug}: code {code!r} is not like 'ADV101'")
    try:
        Layer(layer)
        Severity(severity)
    except ValueError as bad:
        raise RuleDefinitionError(f"rule {slug}: {bad}") from None
    for name, value in thresholds.items():
        if not isinstance(value, Threshold):
            raise RuleDefinitionError(f"rule {slug}: threshold {name!r} is not a Threshold(...)")
    params = [
        p for p in inspect.signature(check).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(params) != 2:
        raise RuleDefinitionError(
            f"rule {slug}: check must take exactly (ev, th), it takes {len(params)} required arguments"
        )
    if not doc:
        raise RuleDefinitionError(f"rule {slug}: the module has no docstring documenting the rule")
