"""The step computes in a precision this device runs far slower than float32.

What it detects:
    Operators that do the step's arithmetic (matmuls, convolutions, attention: what the matmul roofs
    measure) in bfloat16, float16 or float64, where the roof advisor measured on this device for
    that dtype is at least ``min_ratio`` times below float32's, holding at least ``min_share`` of the
    step in what float32 would give back (their share of the step times ``1 - 1/ratio``). The roofs
    are this machine's (``advisor ready`` and the report's roofline say when and how they were
    measured): bfloat16 on a CPU without AVX512-BF16 or AMX, or float16 on one without AVX512-FP16, is
    emulated, tens of times slower than float32; float64 runs at half float32's rate on a V100 and at a
    thirty-second or less on inference GPUs (A10, L4, T4), though at float32's on an A100's or H100's FP64
    tensor cores. Where a GPU's roofs could not be measured its datasheet's stand in; a dtype the datasheet
    omits is not judged.
    Placed at the ``torch.autocast`` call that chose the precision where one did, else at the lines of the
    model file that bring the dtype in (``.bfloat16()``, ``.half()``, ``.double()``, ``torch.from_numpy``,
    ``.to(torch.bfloat16)``, a factory's ``dtype=torch.bfloat16``), and at the lines of the operators.

Why it matters:
    Code written for a GPU or a bf16-capable CPU (``torch.autocast("cpu", dtype=torch.bfloat16)``,
    a model cast with ``.to(torch.bfloat16)``) keeps its precision on a laptop, an older server or a
    CI runner, where the same operators run emulated: a step 2-34 times slower than in float32,
    with nothing in the trace but every operator being slow. float64 reaches a model through
    NumPy's default dtype (``torch.from_numpy`` of a float64 array) or Python floats and costs the same
    way on a GPU. The roofs decide, not the dtype's name; measured on two kinds of machine (matmul
    GFLOP/s, 2 threads):

    ====================================================  =======  ========  =======  =======
    machine                                               float32  bfloat16  float16  float64
    ====================================================  =======  ========  =======  =======
    AMD EPYC with AVX512-BF16 (bf16 native: no finding)       202       424      3.2     86.7
    the same, AVX2 only (``ONEDNN_MAX_CPU_ISA=AVX2``)         204      3.24        -        -
    a 2-core AMD EPYC with AVX2 only                          140       1.4        -        -
    ====================================================  =======  ========  =======  =======

    There, bf16 autocast made a small transformer's step 10x slower (fixed: 10.4x [9.6-10.6]), and a
    float64 MLP's 2.6x (float64 is 2.3x below float32 even on the native machine).

How to fix:
    Choose the precision from the device: autocast where it runs natively, off elsewhere
    (``torch.autocast("cpu", dtype=torch.bfloat16, enabled=torch.backends.mkldnn.is_available() and
    torch.ops.mkldnn._is_mkldnn_bf16_supported())``, or a configuration flag); keep the weights in
    float32 on such a device; cast float64 inputs to float32 where they are made
    (``torch.from_numpy(array).float()``).

Example:
    Before::

        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)

    After::

        native_bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=native_bf16):
            loss = loss_fn(model(x), y)
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import CONV_OPS, MATMUL_OPS, ROOF_ATTENTION, ROOF_ATTENTION_BACKWARD
from advisor.rulekit.fixing import attribute, with_switches
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import site_label
from advisor.trace.roofline import operator_rates

SLOW_DTYPES = ("bfloat16", "float16", "float64")
COMPUTE = MATMUL_OPS | CONV_OPS | ROOF_ATTENTION | ROOF_ATTENTION_BACKWARD
CASTS = {dtype: calls + (f"to(torch.{dtype})", f"dtype=torch.{dtype}")  # in the source (capture/calls.py)
         for dtype, calls in (("float64", ("torch.from_numpy", "double")), ("bfloat16", ("bfloat16",)),
                              ("float16", ("half",)))}
CALLED = {"double": ".double()", "torch.from_numpy": "torch.from_numpy()", "bfloat16": ".bfloat16()",
          "half": ".half()", **{f"to(torch.{dtype})": f".to(torch.{dtype})" for dtype in SLOW_DTYPES}}  # as written
DOCS = ["https://pytorch.org/docs/stable/amp.html#cpu-training-only",
        "https://pytorch.org/docs/stable/notes/numerical_accuracy.html"]


@rule(
    slug="slow-precision",
    code="ADV151",
    layer=Layer.MODEL,
    needs=("trace", "peaks"),
    severity=Severity.MEDIUM,
    high_at="high_share",
    thresholds={
        "min_ratio": Threshold(1.5, "float32's measured matmul roof over the dtype's, from which the dtype is slow"),
        "min_share": Threshold(0.05, "share of the step float32 would give back: the dtype's share times "
                                     "1 - 1/ratio"),
        "high_share": Threshold(0.3, "the same share from which the finding is high"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    roofs = ev.peaks.flops_per_s
    float32 = roofs.get("float32", 0.0)
    # the operators the matmul roofs are for: an elementwise one in bf16 is not the matmul roof's ratio slower
    rates = [rate for rate in operator_rates(ev.trace, ev.peaks) if rate.dtype in SLOW_DTYPES and rate.op in COMPUTE]
    judged = []
    for dtype in sorted({rate.dtype for rate in rates}):
        roof = roofs.get(dtype)
        if not roof or not float32:
            continue  # not measured on this device (an older cache): nothing to hold the dtype against
        ratio = float32 / roof
        group = [rate for rate in rates if rate.dtype == dtype]
        share = min(1.0, sum(rate.share_of_step for rate in group))
        judged.append((share * max(0.0, 1 - 1 / ratio), dtype, ratio, share, group))
    if not judged:
        yield Clean(why="no operator of the profiled step computes in bfloat16, float16 or float64" if not rates
                    else "the dtypes the step computes in were not measured on this device")
        return
    slow = [entry for entry in judged if entry[2] >= th.min_ratio]
    if not slow:
        yield Clean(why=", ".join(f"{d} runs at {1 / r:.2g}x float32's roof here ({s:.0%} of the step)"
                                  for _, d, r, s, _ in judged) + f": below {th.min_ratio:g}x slower, not slow")
        return
    recoverable, dtype, ratio, share, group = max(slow, key=lambda item: item[0])
    margin = ev.share_margin(f"share of the step float32 would give back from {dtype}", recoverable, th.min_share)
    yield margin
    if recoverable < th.min_share:
        return
    regions = [site for site in ev.call_sites("torch.autocast", runtime=True)
               if site.arguments.get("self.fast_dtype") == f"torch.{dtype}" and site.arguments.get("self._enabled")
               != "False"]
    autocast = ev.target.autocast == dtype or bool(regions)
    # the casts of the model and its inputs first (a factory's dtype= inside the forward usually follows them)
    chosen = regions if autocast else sorted(ev.call_sites(*CASTS[dtype]),
                                             key=lambda site: (site.api.startswith("dtype="), site.line))
    peaks = ev.peaks
    in_parameters = _mostly(ev.target.param_dtypes, dtype)
    cause = ("an autocast region" + (f" at {site_label(chosen[0].file, chosen[0].line)}" if chosen else "")
             if autocast else f"{dtype} tensors" + (" (the model's parameters)" if in_parameters else "")
             + (" from " + ", ".join(f"{CALLED.get(site.api, site.api)} at {site_label(site.file, site.line)}"
                                     for site in chosen[:3])
                if chosen else ""))
    yield Finding(
        message=(f"{share:.0%} of the step computes in {dtype}, which this device runs at {roofs[dtype] / 1e9:.3g} "
                 f"GFLOP/s against float32's {float32 / 1e9:.3g} ({ratio:.3g}x slower, the roofs {peaks.source}): "
                 f"{cause} chose it; in float32 about {recoverable:.0%} of the step would go"),
        impact=recoverable,
        margin=margin,
        evidence={"dtype": dtype, "roof_ratio": round(ratio, 2), "share_of_step": round(share, 4),
                  "recoverable_share": round(recoverable, 4), "roof_flops_per_s": {"float32": float32, dtype:
                                                                                    roofs[dtype]},
                  "autocast": autocast, "roofs_source": peaks.source},
        locations=[Location.at(site.file, site.line, note=(f"autocast to {dtype}: the precision chosen here" if autocast
                                                           else f"{CALLED.get(site.api, site.api)}: where {dtype} may "
                                                                "come from"))
                   for site in chosen[:1 if autocast else 3]]
        + [Location.at(file, line, note=f"{', '.join(ops)} in {dtype}: {part:.0%} of the step")
           for (file, line), (part, ops) in _by_line(group)[:3]],
        fix=Fix(summary=(f"autocast only where {dtype} is native: enabled=<the device runs {dtype} natively> (here: "
                         "off)" if autocast else
                         "float32: torch.from_numpy(array).float() where NumPy's arrays come in, the model without "
                         ".double()" if dtype == "float64" else
                         f"compute in float32 on this device: the weights .float(), {dtype} inputs cast where made"),
                docs=DOCS),
    )


def _by_line(group: list) -> list:
    """The operators' lines, most of the step first: (file, line) -> (share, its operators)."""
    lines: dict[tuple[str, int], tuple[float, list[str]]] = {}
    for rate in group:
        if rate.file:
            share, ops = lines.get((rate.file, rate.line), (0.0, []))
            name = rate.op.removeprefix("aten::")
            lines[(rate.file, rate.line)] = (share + rate.share_of_step, ops + ([name] if name not in ops else []))
    return sorted(lines.items(), key=lambda item: -item[1][0])


def _mostly(param_dtypes: dict[str, int], dtype: str) -> bool:
    """Most of the model's parameters are in ``dtype`` (the TargetInfo's counts name dtypes as torch prints them)."""
    total = sum(param_dtypes.values())
    return bool(total) and sum(n for name, n in param_dtypes.items() if name.endswith(dtype)) > total / 2


def _no_autocast(target, finding):
    """Every autocast region of the step made with ``enabled=False``: the step as in float32."""
    import torch

    autocast = torch.amp.autocast_mode.autocast
    original = autocast.__init__

    def disabled(self, *args, **kwargs):
        kwargs["enabled"] = False
        if len(args) >= 3:  # device_type, dtype, enabled given by position
            args = (*args[:2], False, *args[3:])
        original(self, *args, **kwargs)
    return with_switches(target, attribute(autocast, "__init__", disabled))


def _float32(target, finding):
    """The model and the feed's floating tensors in float32: the step as its tensors cast where they came in."""
    from advisor.rulekit.fixing import replace_target

    return replace_target(target, float32_inputs=True,
                          model_transforms=(*target.model_transforms, lambda model: model.float()))


@check.fix(tolerance=0.05, what="autocast off in the step, or the weights and the feed in float32",
           tolerance_of=lambda finding: 1e-4 if finding.evidence.get("dtype") == "float64" else 0.05)
def fix(target, finding):
    """Autocast made with enabled=False; otherwise the model's weights and the feed's tensors of the dtype in
    float32 (float32's results are float64's to its rounding, a reduced precision's to that precision's)."""
    return _no_autocast(target, finding) if finding.evidence.get("autocast") else _float32(target, finding)

