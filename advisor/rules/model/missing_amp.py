"""Matmul-heavy step in fp32 without autocast (missing mixed precision).

What it detects:
    A step whose matrix multiplies and convolutions run in float32 (the dtypes of the operators
    in the trace, whatever the parameters' are), with no autocast active, where that work
    dominates: at least
    ``min_gflops`` GFLOP per step (from the profiled operators' shapes) in matmuls averaging at least
    ``min_mflop_per_matmul`` MFLOP each (many tiny matmuls gain little), and at least
    ``min_matmul_share`` of the step in mm/bmm/addmm/conv operators (their profiled time over
    the profiler-free step time).

Why it matters:
    Tensor cores (Volta and newer GPUs) and the AMX / AVX512-BF16 units of recent CPUs run
    bf16/fp16 matmuls several times faster than fp32, and halve the memory traffic of
    activations. Autocast keeps precision-sensitive ops (softmax, norms, losses) in fp32, so
    most models train and infer at the same quality.

How to fix:
    On CUDA: wrap the forward (and loss) in ``torch.autocast("cuda", dtype=torch.bfloat16)`` on
    Ampere or newer; on older GPUs use fp16 with ``torch.amp.GradScaler`` for training. On a
    CPU with native bf16: ``torch.autocast("cpu", dtype=torch.bfloat16)``, and measure: CPU
    gains vary by model (1.7x for a ResNet, 0.88x for a small GPT training step on one
    AVX512-BF16 machine), so CPU findings are low severity. On a CPU without native bf16, bf16
    is emulated and slower: the advice applies when the model runs on a GPU.

Example:
    Before::

        loss = loss_fn(model(x), y)

    After::

        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import MATMUL_FLOP_OPS, MATMUL_OPS, WIDER_THAN_FLOAT32
from advisor.patch.codemods import NoEdit
from advisor.patch.common_sites import forward_and_loss
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.helpers import is_ampere_or_newer, low_precision, outermost, slower_than_float32
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Margin, Severity, Threshold, Thresholds, rule

# A model whose parameters are mostly bf16/fp16 already computes in reduced precision.

DOCS = ["https://pytorch.org/docs/stable/amp.html",
        "https://pytorch.org/tutorials/recipes/recipes/amp_recipe.html"]


@rule(
    slug="missing-amp",
    code="ADV104",
    layer=Layer.MODEL,
    needs=("trace", "flops"),
    severity=Severity.MEDIUM,
    thresholds={
        "min_gflops": Threshold(0.1, "matmul/conv work per step below which casts outweigh the gain", "GFLOP"),
        "min_mflop_per_matmul": Threshold(
            10, "mean work per matmul/conv op; smaller ops (e.g. per-expert slivers) gain little", "MFLOP"),
        "min_matmul_share": Threshold(0.5, "share of the step in matmul/conv operators"),
        "max_reduced_share": Threshold(0.2, "share of matmul ops already in bf16/fp16 above which AMP is in use"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.target.autocast is not None:
        yield Clean(why=f"the step runs under autocast ({ev.target.autocast}) already")
        return
    # the dtypes of the operators that take the step's time decide, not the parameters' (bf16 embedding tables
    # beside fp32 dense layers leave the matmuls in fp32)
    matmuls = outermost(ev.trace, MATMUL_OPS)
    if not matmuls:
        yield Clean(why="no matmul or convolution in the profiled steps")
        return
    wide = [op for op in matmuls if op.input_types and op.input_types[0] in WIDER_THAN_FLOAT32]
    if len(wide) > len(matmuls) / 2:  # float64: slower still than float32, which slow-precision says
        yield Clean(why=f"the step's matmuls run in float64 ({len(wide)} of {len(matmuls)} in the profiled steps): "
                        "slow-precision judges them against float32")
        return
    fp32 = [op for op in matmuls if not low_precision(op) and op not in wide]
    reduced_share = 1 - (len(fp32) + len(wide)) / len(matmuls)
    if reduced_share > th.max_reduced_share:  # autocast, manual casts or a bf16 model run them in reduced precision
        yield Clean(why=f"the step's matmuls run in reduced precision already ({len(matmuls) - len(fp32)} of "
                        f"{len(matmuls)} in the profiled steps)")
        return
    matmul_flops = sum(n for op, n in ev.flops.by_op.items() if op in MATMUL_FLOP_OPS) * (1 - reduced_share)
    if matmul_flops < th.min_gflops * 1e9:
        yield Margin(quantity="fp32 matmul GFLOP per step", value=round(matmul_flops / 1e9, 4),
                     threshold=th.min_gflops, noise=0.0)
        return
    mflop_per_matmul = matmul_flops / (len(fp32) / ev.trace.step_count) / 1e6
    if mflop_per_matmul < th.min_mflop_per_matmul:  # measured 1.03x for a top-2 MoE of 4-MFLOP experts in bf16
        yield Margin(quantity="MFLOP per fp32 matmul", value=round(mflop_per_matmul, 4),
                     threshold=th.min_mflop_per_matmul, noise=0.0)
        return
    share = ev.share_of_step(ev.trace.median_per_step(fp32))
    if share is None:
        yield Clean(why="the step's time is unknown, so the matmuls' share is too")
        return
    margin = ev.share_margin("matmul share of the step", share, th.min_matmul_share)
    yield margin  # how near it came: reported when the rule stays silent too
    if share < th.min_matmul_share:
        return
    severity, advice = _device_advice(ev, share)
    yield Finding(
        severity=severity,
        message=(
            f"{matmul_flops / 1e9:.3g} GFLOP of matmul/conv per step run in fp32 without autocast, "
            f"{share:.0%} of the step; {advice}"
        ),
        impact=share,
        margin=margin,
        evidence={
            "matmul_gflop_per_step": round(matmul_flops / 1e9, 4),
            "matmul_share_of_step": round(share, 4),
            "mflop_per_matmul": round(mflop_per_matmul, 2),
            "fp32_parameters": ev.target.param_dtypes.get("float32", 0),
            "fp32_matmuls_profiled": len(fp32), "matmuls_profiled": len(matmuls),
            "device": ev.target.device,
            **({"cpu_native_bf16": ev.env.cpu_native_bf16} if ev.env is not None else {}),
            "autocast_dtype": _dtype(ev),
            # the edit would run slower here (bf16 emulated): advisor fix offers it on no flag (patch_plan.py)
            "slower_on_this_device": not ev.on_cuda and severity == Severity.INFO,
            **({"forward_call_line": ev.target.forward_call.line} if ev.target.forward_call is not None else {}),
        },
        locations=_places(ev, matmuls),
        fix=_fix(ev),
    )


def _device_advice(ev: Evidence, share: float) -> tuple[Severity, str]:
    if ev.on_cuda:
        if is_ampere_or_newer(ev.env):
            return Severity.HIGH, "bf16 autocast runs them on tensor cores"
        return Severity.HIGH, "fp16 autocast (with GradScaler when training) runs them on tensor cores"
    if "bfloat16" in slower_than_float32(ev):
        # the roofs measured here decide before the CPU's flags: bf16 slower than float32 is no gain on this device
        roofs = ev.peaks.flops_per_s
        return Severity.INFO, (f"bf16 runs at {roofs['bfloat16'] / 1e9:.3g} GFLOP/s on this CPU against float32's "
                               f"{roofs['float32'] / 1e9:.3g} (measured), so autocast would be slower here; it "
                               "applies on a GPU or a CPU with native bf16 (AVX512-BF16, AMX)")
    if ev.env is not None and ev.env.cpu_native_bf16:
        # Measured on one AVX512-BF16 CPU: 1.7x for a ResNet and an fp32 MLP stack, 0.88x for a
        # small GPT training step. CPU gains are real but not assured: say so, at low severity.
        return Severity.LOW, ("this CPU has native bf16 (AVX512-BF16/AMX): bf16 autocast often speeds them up, "
                              "but CPU gains vary by model, so measure it; on a GPU the gain is reliable")
    return Severity.INFO, ("this CPU has no native bf16, so autocast would not help here; "
                           "it applies when the model runs on a GPU")


def _dtype(ev: Evidence) -> str:
    """What the device runs fast: bf16 on a CPU or an Ampere-or-newer GPU, fp16 on older GPUs."""
    return "float16" if ev.on_cuda and not is_ampere_or_newer(ev.env) else "bfloat16"


def _fix(ev: Evidence) -> Fix:
    training = ev.target.mode == "train"
    if ev.on_cuda:
        dtype = _dtype(ev)
        after = f'with torch.autocast("cuda", dtype=torch.{dtype}):\n    loss = loss_fn(model(x), y)'
        if dtype == "float16" and training:
            after = ("scaler = torch.amp.GradScaler()\n" + after +
                     "\nscaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()")
        summary = f"run the forward and loss under torch.autocast('cuda', dtype=torch.{dtype})"
    else:
        after = 'with torch.autocast("cpu", dtype=torch.bfloat16):\n    out = model(x)'
        summary = "run the forward under torch.autocast('cpu', dtype=torch.bfloat16)"
        if ev.env is None or not ev.env.cpu_native_bf16:
            summary += " on CPUs with AVX512-BF16/AMX; on GPU use torch.autocast('cuda', dtype=torch.bfloat16)"
    before = "loss = loss_fn(model(x), y)" if training else "out = model(x)"
    return Fix(summary=summary, before=before, after=after, docs=DOCS)


def _places(ev: Evidence, matmuls: list) -> list[Location]:
    """Where autocast goes (a script's call of the model), then the lines that run the most matmul time."""
    call = ev.target.forward_call
    forward = [call.model_copy(update={"note": "the model's forward: run it and the loss under autocast"})] if call else []
    return forward + _hot_lines(ev, matmuls)


def _hot_lines(ev: Evidence, matmuls: list) -> list[Location]:
    by_line: dict[tuple[str, int], float] = {}
    for op in matmuls:
        if op.src is not None and op.src.exact:
            key = (op.src.file, op.src.line)
            by_line[key] = by_line.get(key, 0.0) + op.dur
    total = sum(by_line.values()) or 1.0
    ranked = sorted(by_line.items(), key=lambda item: -item[1])[:5]
    return [Location.at(file, line, note=f"{us / total:.0%} of the matmul time") for (file, line), us in ranked]


@check.fix(tolerance=0.05, what="autocast to bf16 (fp16 with GradScaler on pre-Ampere GPUs)")
def fix(target, finding):
    """Run the step under autocast: the dtype the device runs fast."""
    import torch

    from advisor.rulekit.rule import NotVerifiable

    if target.device.type == "cuda":
        dtype = torch.bfloat16 if torch.cuda.get_device_capability(target.device)[0] >= 8 else torch.float16
        return replace_target(target, autocast_dtype=dtype,
                                   grad_scaler=dtype is torch.float16 and target.mode == "train")
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        raise NotVerifiable("this CPU has no native bf16, so autocast would run emulated; the fix applies on a GPU")
    return replace_target(target, autocast_dtype=torch.bfloat16)


@check.patch(safe=False, what="the model's forward under torch.autocast")
def patch(files, finding):
    """In a script, the statement that calls the model (and the loss computed from its output on the next
    line) runs under autocast; in a model file, the forward of the model ``get_model()`` builds (a class
    of the file's own). In the dtype the finding's device runs fast: reduced precision changes results by
    design (unsafe)."""
    device = "cuda" if str(finding.evidence.get("device", "")).startswith("cuda") else "cpu"
    dtype = finding.evidence.get("autocast_dtype") or "bfloat16"
    if dtype != "bfloat16" and device == "cpu":
        raise NoEdit(f"{dtype} autocast on a CPU: not a fix advisor writes")
    if dtype == "float16" and (finding.fix is None or "GradScaler" in finding.fix.after):
        raise NoEdit("fp16 training needs a GradScaler around the backward and the optimizer step: written by hand")
    autocast = f'torch.autocast("{device}", dtype=torch.{dtype})'
    line = finding.evidence.get("forward_call_line")
    call = next((loc for loc in finding.locations if loc.file and loc.line == line), None)
    if call is None:
        source = files.read(files.entry)
        return source.with_torch([source.wrap_body(source.method_of_returned_class("get_model", "forward"), autocast)])
    source = files.read(call.file)
    return source.with_torch(source.wrap_statements(forward_and_loss(source, call.line), autocast))

