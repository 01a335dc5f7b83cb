"""Families of profiler operators that rules reason about, and small helpers over a Trace."""

from __future__ import annotations

import functools
from typing import Iterable

from advisor.trace.parse import Op, Trace

# Matrix multiplies and convolutions: the work tensor cores and reduced precision speed up.
MATMUL_OPS = frozenset({
    "aten::linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm",
    "aten::addbmm", "aten::einsum", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
    "aten::_convolution", "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d",
    "aten::convolution_backward", "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::mkldnn_convolution", "aten::cudnn_convolution", "aten::_mkldnn_linear",
})
# FLOP-counter names (torch.utils.flop_counter) of the same work.
MATMUL_FLOP_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "convolution", "_convolution", "convolution_backward",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_flash_attention_forward", "_efficient_attention_forward", "_flash_attention_backward",
    "_efficient_attention_backward", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention_backward", "_scaled_dot_product_flash_attention_for_cpu_backward",
})
# Operators that exist to copy memory into a new layout.
LAYOUT_COPY_OPS = frozenset({"aten::contiguous", "aten::clone", "aten::_reshape_copy", "aten::copy_"})
COLLECTIVE_MARKERS = ("nccl", "rccl")  # ncclKernel_*, ncclDevKernel_*, and ROCm's RCCL
LOW_PRECISION_TYPES = frozenset({"c10::BFloat16", "c10::Half", "BFloat16", "Half", "c10::Float8_e4m3fn",
                                 "c10::Float8_e5m2"})


def outermost(trace: Trace, names: Iterable[str]) -> list[Op]:
    """Step ops in ``names`` not nested inside another op of ``names`` (no double counting)."""
    family = frozenset(names)
    return [o for o in trace.step_ops()
            if o.name in family and (o.parent is None or trace.ops[o.parent].name not in family)]


def is_contiguous(dims: list, strides: list) -> bool:
    """Row-major contiguity from a profiler's Input Dims / Input Strides (size-1 dims ignored)."""
    if not isinstance(dims, list) or not isinstance(strides, list) or len(dims) != len(strides):
        return True  # unknown: assume nothing
    expected = 1
    for size, stride in zip(reversed(dims), reversed(strides)):
        if not isinstance(size, int) or not isinstance(stride, int):
            return True
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def is_broadcast(dims: list, strides: list) -> bool:
    """A stride of 0 on a dimension longer than 1: an expanded (broadcast) view."""
    return isinstance(dims, list) and isinstance(strides, list) and any(
        isinstance(size, int) and size > 1 and stride == 0 for size, stride in zip(dims, strides))


def low_precision(op: Op) -> bool:
    return bool(op.input_types) and op.input_types[0] in LOW_PRECISION_TYPES


COLLECTIVE_CALL_PREFIX = "c10d::"


@functools.lru_cache(maxsize=4096)  # a trace repeats a few hundred op names thousands of times
def is_collective_call(op_name: str) -> bool:
    """A collective as the dispatcher runs it on the host (``c10d::allreduce_``), whatever the backend."""
    return op_name.startswith(COLLECTIVE_CALL_PREFIX) and any(word in op_name for word in COLLECTIVE_CALLS)


COLLECTIVE_CALLS = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall", "_reduce_", "gather", "scatter")


@functools.lru_cache(maxsize=4096)  # kernel names are long and few: lowering each every time cost more
def is_collective(kernel_name: str) -> bool:
    lowered = kernel_name.lower()
    return any(marker in lowered for marker in COLLECTIVE_MARKERS)


# The same work as captured graph nodes name it (capture.graph.target_name): modules' functional
# calls, tensor methods and torch functions.
GRAPH_MATMULS = frozenset({"F.linear", "matmul", "torch.matmul", "bmm", "torch.bmm", "mm", "torch.mm", "addmm",
                           "torch.addmm", "baddbmm", "torch.baddbmm", "torch.einsum"})
GRAPH_BIAS_FIRST = frozenset({"addmm", "torch.addmm", "baddbmm", "torch.baddbmm"})  # (bias, a, b)
REDUCED_DTYPES = frozenset({"bfloat16", "float16"})  # torch dtype names, as evidence records them


def is_ampere_or_newer(env) -> bool:
    """An NVIDIA GPU of compute capability 8.0 or newer: bf16 and TF32 tensor cores."""
    return (env is not None and env.gpu_capability is not None and tuple(env.gpu_capability) >= (8, 0)
            and "AMD" not in env.device_name.upper())


CONV_MODULES = frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"})
CONV_FUNCTIONS = frozenset({"F.conv1d", "F.conv2d", "F.conv3d", "F.conv_transpose1d", "F.conv_transpose2d",
                            "F.conv_transpose3d", "torch.conv1d", "torch.conv2d", "torch.conv3d"})
CONV_OPS = frozenset({"aten::convolution", "aten::cudnn_convolution", "aten::mkldnn_convolution",
                      "aten::_convolution", "aten::miopen_convolution"})


def convolution_sites(ev) -> list[tuple[str, int, str]]:
    """Each convolution of the model once: (file, line, module path or op), graph first, else trace."""
    sites: dict[tuple[str, int, str], None] = {}
    if ev.graph is not None:
        for node in ev.graph.calls():
            if node.module_type in CONV_MODULES or node.target in CONV_FUNCTIONS:
                sites[(node.file, node.line, node.module_path or node.target)] = None
    elif ev.trace is not None:
        for op in outermost(ev.trace, CONV_OPS):
            file, line = (op.src.file, op.src.line) if op.src is not None else ("", 0)
            sites[(file, line, op.name)] = None
    return list(sites)
