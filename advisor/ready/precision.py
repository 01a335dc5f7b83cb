"""reduced-precision evidence: the outputs under bf16 (or fp16) autocast against fp32, and the speed of
both where the device computes the reduced type natively (elsewhere it is emulated: no speed to report)."""

from __future__ import annotations

import statistics
from typing import Any

import torch

from advisor.ready.measured import Blocker, PrecisionEvidence
from advisor.ready.places import first_line, raised_at
from advisor.verify.numerics import compare, tensors_of
from advisor.workload.target import call_model
from advisor.workload.timing import timer_for

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
CALLS = 20


def measure_precision(model: torch.nn.Module, inputs: Any, device: torch.device, name: str,
                      model_file: str) -> PrecisionEvidence:
    dtype = DTYPES[name]
    evidence = PrecisionEvidence(dtype=name)
    evidence.native, evidence.native_note = native(device, dtype)

    def reduced() -> Any:
        with torch.autocast(device_type=device.type, dtype=dtype):
            return call_model(model, inputs)
    with torch.inference_mode():
        torch.manual_seed(0)  # the same random draws on both sides (a dropout left on): only precision differs
        reference = [t.clone() for t in tensors_of(call_model(model, inputs))]
        try:
            torch.manual_seed(0)
            candidate = [t.clone() for t in tensors_of(reduced())]
        except Exception as failure:  # noqa: BLE001 - autocast may not support an op of the model
            evidence.error = Blocker(message=f"{type(failure).__name__}: {first_line(failure)}",
                                     location=raised_at(failure, model_file))
            return evidence
        difference = compare(reference, candidate)
        evidence.max_abs_error, evidence.max_rel_error = difference.max_abs_error, difference.max_rel_error
        if evidence.native:
            timer = timer_for(device)
            full, half = [], []
            for _ in range(CALLS):
                full.append(timer(lambda: call_model(model, inputs)))
                half.append(timer(reduced))
            evidence.fp32_ms, evidence.reduced_ms = statistics.median(full[3:]), statistics.median(half[3:])
    return evidence


def native(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        needed = 8 if dtype is torch.bfloat16 else 7
        return major >= needed, f"compute capability {major}.{minor}"
    if dtype is torch.bfloat16:
        ok = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        return ok, "this CPU has native bf16 (AVX512-BF16/AMX)" if ok else "this CPU has no native bf16: emulated"
    ok = bool(getattr(torch.ops.mkldnn, "_is_mkldnn_fp16_supported", lambda: False)())
    return ok, "this CPU has native fp16 (AVX512-FP16/AMX-FP16)" if ok else "this CPU has no native fp16: emulated"
