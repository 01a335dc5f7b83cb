"""fp32 matrix multiplies on an Ampere-or-newer GPU without TF32 tensor cores.

What it detects:
    On an NVIDIA GPU of compute capability 8.0 or newer (A100, H100, RTX 30xx and later):

    * in a live audit, ``torch.backends.cuda.matmul.allow_tf32`` is False and
      ``torch.get_float32_matmul_precision()`` is ``"highest"`` while the model runs float32
      matmuls outside autocast;
    * in a recorded trace, fp32 GEMM kernels running on CUDA cores (``*_sgemm_*`` kernels,
      not the ``tf32`` / ``s1688`` tensor-op ones) take at least ``min_share`` of GPU time.

Why it matters:
    PyTorch leaves TF32 off for matmuls by default (cuDNN convolutions use it by default).
    TF32 runs fp32 matmuls on tensor cores with a 10-bit mantissa: up to 8x the fp32 throughput
    on A100, accurate enough for almost all training. Traces often show convolutions in TF32
    and the linear layers of the same model in plain fp32.

How to fix:
    ``torch.set_float32_matmul_precision("high")`` at start-up (or run the model under
    ``torch.autocast`` with bf16, which gains more).

Example:
    Before::

        model = Model().cuda()

    After::

        torch.set_float32_matmul_precision("high")   # TF32 tensor cores for fp32 matmuls
        model = Model().cuda()
"""

from __future__ import annotations

import re
from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import GRAPH_MATMULS
from advisor.rulekit.fixing import setting, with_switches
from advisor.rulekit.helpers import is_ampere_or_newer, measured_gain
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Margin, Severity, Threshold, Thresholds, rule

# CUDA-core fp32 GEMMs; tensor-op kernels say tf32 / s1688 / s16816 / tensorop instead.
FP32_GEMM = re.compile(r"sgemm", re.IGNORECASE)
TENSOR_CORE_GEMM = re.compile(r"tf32|s1688|s16816|tensorop|xmma", re.IGNORECASE)


@rule(
    slug="tf32-disabled",
    code="ADV124",
    layer=Layer.RUNTIME,
    needs=("env",),
    severity=Severity.MEDIUM,
    thresholds={"min_share": Threshold(0.05, "share of GPU kernel time in fp32 CUDA-core GEMMs (recorded traces)")},
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    env = ev.env
    if not is_ampere_or_newer(env):
        yield Clean(why="TF32 needs an NVIDIA Ampere or newer GPU, and this run had none")
        return
    if ev.trace is not None and ev.trace.kernels:
        found = _from_kernels(ev, th)
    elif env.tf32_matmul is False and env.float32_matmul_precision == "highest" and ev.target.autocast is None:
        found = _from_settings(ev)
    else:
        yield Clean(why="TF32 is allowed, or the step runs under autocast")
        return
    gain = measured_gain(ev, "tf32")
    for item in found:
        if isinstance(item, Finding) and gain is not None and gain < MIN_GAIN:
            # the roofs measured on this GPU decide: TF32 that is no faster here is said, not offered as a gain
            item = item.model_copy(update={"severity": Severity.INFO, "message": item.message + (
                f"; but TF32 measured {gain:.2f}x float32's matmul rate on this GPU: no gain here, it applies on "
                "GPUs whose tensor cores run it faster")})
        yield item


def _from_kernels(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    kernels = ev.trace.kernels
    total = sum(k.dur for k in kernels)
    kinds = {name: _gemm_kind(name) for name in {k.name for k in kernels}}  # names repeat: classify each once
    fp32 = [k for k in kernels if kinds[k.name] == "fp32"]
    tensor_core = [k for k in kernels if kinds[k.name] == "tensor-core"]
    share = sum(k.dur for k in fp32) / total if total else 0.0
    yield Margin(quantity="fp32 GEMM kernels' share of kernel time", value=round(share, 4), threshold=th.min_share,
                 noise=0.0)
    if share < th.min_share:
        return
    time_by_name: dict[str, float] = {}
    for kernel in fp32:
        time_by_name[kernel.name] = time_by_name.get(kernel.name, 0.0) + kernel.dur
    names = sorted(time_by_name, key=lambda n: -time_by_name[n])
    yield Finding(
        message=(f"fp32 GEMMs on CUDA cores take {share:.0%} of GPU kernel time on {ev.env.device_name} "
                 f"({len(fp32)} kernels, e.g. {names[0][:60]})"
                 + (f", while {len(tensor_core)} other GEMM or convolution kernels already use TF32 tensor cores" if tensor_core else "")
                 + ": TF32 is off for matmuls"),
        impact=None,
        evidence={"fp32_gemm_share_of_gpu_time": round(share, 4), "fp32_gemm_kernels": len(fp32),
                  "tensor_core_gemm_kernels": len(tensor_core), "kernel_names": names[:5],
                  "device": ev.env.device_name},
        fix=_advice(),
    )


MIN_GAIN = 1.2  # TF32's measured roof over float32's below which enabling it is no gain on this GPU


def _gemm_kind(name: str) -> str:
    if TENSOR_CORE_GEMM.search(name):
        return "tensor-core" if "gemm" in name.lower() else ""
    return "fp32" if FP32_GEMM.search(name) else ""


def _from_settings(ev: Evidence) -> Iterator[Finding]:
    matmuls = [n for n in ev.graph.calls() if n.target in GRAPH_MATMULS and n.dtype == "float32"] if ev.graph else []
    if not matmuls:
        yield Clean(why="TF32 is off, but no float32 matmul runs in the graph")
        return
    yield Finding(
        message=(f"{len(matmuls)} float32 matmul(s) run on {ev.env.device_name} with TF32 off "
                 "(allow_tf32=False, float32_matmul_precision='highest'): tensor cores stay idle"),
        evidence={"fp32_matmuls": len(matmuls), "float32_matmul_precision": "highest",
                  "device": ev.env.device_name},
        fix=_advice(),
    )


def _advice() -> Fix:
    return Fix(summary='call torch.set_float32_matmul_precision("high") at start-up (TF32 tensor cores), '
                       "or run under bf16 autocast",
               docs=["https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices"])


@check.fix(tolerance=1e-2, what="TF32 matmuls", needs_cuda="TF32 is a CUDA tensor-core mode")
def fix(target, finding):
    """TF32 keeps a 10-bit mantissa: outputs move by about 1e-3 relative."""
    import torch

    return with_switches(target, setting(torch.get_float32_matmul_precision, torch.set_float32_matmul_precision, "high"))


@check.patch(safe=False, what='torch.set_float32_matmul_precision("high") at the top of the entry file')
def patch(files, finding):
    """TF32 matmuls keep a 10-bit mantissa: results move by about 1e-3 (unsafe: made with --unsafe-fixes)."""
    source = files.read(files.entry)
    return source.with_torch([source.after_imports('torch.set_float32_matmul_precision("high")')])
