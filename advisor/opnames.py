"""The names of operators, once: profiler ops and kernels, FLOP-counter names, captured graph targets and
the APIs rules and patterns recognise; and how a graph node's target is named (``target_name``).

Names only (nothing here reads a trace or runs torch): what rules read from evidence with them is in
``advisor.rulekit.helpers``."""

from __future__ import annotations

import functools
import operator
from typing import Any

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
# What the summary counts as copies and layout: those, conversions, and reshapes (which copy when they must)
COPY_AND_LAYOUT_OPS = LAYOUT_COPY_OPS | {"aten::to", "aten::_to_copy", "aten::reshape"}
COLLECTIVE_MARKERS = ("nccl", "rccl")  # ncclKernel_*, ncclDevKernel_*, and ROCm's RCCL
WIDER_THAN_FLOAT32 = frozenset({"double", "c10::complex<double>"})  # the profiler's input type names
LOW_PRECISION_TYPES = frozenset({"c10::BFloat16", "c10::Half", "BFloat16", "Half", "c10::Float8_e4m3fn",
                                 "c10::Float8_e5m2"})


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
TRACE_BIAS_FIRST = frozenset({"aten::addmm", "aten::baddbmm"})  # the same in a trace
# Graph targets whose output is always a fresh contiguous tensor: a .contiguous() after them copies nothing useful
FRESH_CONTIGUOUS = GRAPH_MATMULS | {"torch.cat", "torch.stack", "F.layer_norm", "F.embedding", "contiguous"}
REDUCED_DTYPES = frozenset({"bfloat16", "float16"})  # torch dtype names, as evidence records them


CONV_MODULES = frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"})
CONV_FUNCTIONS = frozenset({"F.conv1d", "F.conv2d", "F.conv3d", "F.conv_transpose1d", "F.conv_transpose2d",
                            "F.conv_transpose3d", "torch.conv1d", "torch.conv2d", "torch.conv3d"})
CONV_OPS = frozenset({"aten::convolution", "aten::cudnn_convolution", "aten::mkldnn_convolution",
                      "aten::_convolution", "aten::miopen_convolution"})
# 2-D convolutions, the layers channels_last applies to: as modules, as ops, and all their work with the backward
CONV_2D_MODULES = frozenset({"Conv2d", "ConvTranspose2d"})
CONV_2D_OPS = frozenset({"aten::conv2d", "aten::conv_transpose2d"})
CONV_WORK_OPS = CONV_OPS | CONV_2D_OPS | {"aten::convolution_backward"}


# --- the roofline: an operator's work from its input shapes (trace/roofline.py) ----------------------------
ROOF_ATTENTION = frozenset({"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention",
                            "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_cudnn_attention"})
ROOF_ATTENTION_BACKWARD = frozenset(f"{name}_backward" for name in ROOF_ATTENTION)
ROOF_CONV = frozenset({"aten::convolution", "aten::convolution_backward"})
BATCHED_MATMULS = frozenset({"aten::bmm", "aten::baddbmm"})  # many products side by side (per head, per group)
# ops that move data and compute nothing: their roof is the bandwidth alone
ROOF_MOVES_ONLY = LAYOUT_COPY_OPS | {"aten::fill_", "aten::zero_", "aten::_to_copy", "aten::to", "aten::cat", "aten::stack",
                                    "aten::index", "aten::index_select", "aten::gather", "aten::embedding"}
# ops that move no data of their own (views, allocation) or only move it (copies): no work to hold to a roof
ROOF_NO_WORK = frozenset({
    "aten::view", "aten::reshape", "aten::_unsafe_view", "aten::t", "aten::transpose", "aten::permute",
    "aten::as_strided", "aten::expand", "aten::slice", "aten::select", "aten::unsqueeze", "aten::squeeze",
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::detach", "aten::alias", "aten::split",
    "aten::chunk", "aten::unbind", "aten::narrow", "aten::resize_", "aten::lift_fresh", "aten::zeros",
    "aten::set_", "aten::result_type", "aten::item", "aten::_local_scalar_dense", "aten::is_nonzero",
})

# --- from misaligned_dims ------------------------------------------------------------
TRACE_MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}

# --- from kernel_storm ------------------------------------------------------------
# the profiler's marks of code torch.compile made (a Dynamo frame; AOTAutograd's training function)
COMPILED_MARKS = ("Torch-Compiled Region", "CompiledFunction")
RECURRENT_OPS = ("aten::sigmoid", "aten::tanh")  # a gated cell's nonlinearities

# --- from sync_memcpy ------------------------------------------------------------
BLOCKING_COPIES = {"cudaMemcpy", "cudaMemcpy2D", "hipMemcpy", "hipMemcpyWithStream", "hipMemcpy2D"}
ASYNC_COPIES = {"cudaMemcpyAsync", "hipMemcpyAsync"}

# --- from non_contiguous ------------------------------------------------------------
LAYOUT_VIEWS = {"permute", "transpose", "t", "T", "mT", "swapaxes", "swapdims", "movedim", "expand",
                "narrow", "unfold", "as_strided", "getitem", "diagonal", "select"}
USER_COPY_APIS = {"Tensor.contiguous", "Tensor.clone", "Tensor.reshape", "torch.reshape", "Tensor.copy_",
                  "torch.clone", "Tensor.flatten", "torch.flatten"}
# Views that keep a transposed operand foldable into the GEMM; view/reshape/flatten of a strided
# tensor need (or make) a contiguous copy, so a .contiguous() before them is not removable.
KEEPS_TRANSPOSE = {"unsqueeze", "squeeze"}
NEEDS_CONTIGUOUS = {"view", "reshape", "flatten", "torch.flatten", "torch.reshape"}

# --- from redundant_copy ------------------------------------------------------------
DTYPE_CONVERSIONS = {"float", "double", "half", "bfloat16", "to", "type"}

# --- from tensor_creation_in_step ------------------------------------------------------------
FROM_HOST = {"tensor", "as_tensor"}  # built from Python data on the host, then copied

# --- from tensor_loop ------------------------------------------------------------
# torch 2.13's torch._foreach_* operators, for evidence without its own torch's (Environment.foreach_operators)
FOREACH_OPERATORS_TORCH_2_13 = frozenset({
    "abs", "acos", "add", "addcdiv", "addcmul", "asin", "atan", "ceil", "clamp_max", "clamp_min", "clone", "copy",
    "cos", "cosh", "div", "erf", "erfc", "exp", "expm1", "floor", "frac", "lerp", "lgamma", "log", "log10", "log1p", "log2",
    "max", "maximum", "minimum", "mm", "mul", "neg", "norm", "pow", "powsum", "reciprocal", "round", "rsqrt", "sigmoid",
    "sign", "sin", "sinh", "sqrt", "sub", "tan", "tanh", "trunc", "zero",
})

# operators that read or relabel a tensor's metadata (``.data =`` asks _has_compatible_shallow_copy_type): no work
METADATA_OP_PREFIXES = ("aten::_has_", "aten::is_", "aten::_is_", "aten::sym_")

# --- from host_sync ------------------------------------------------------------
# torch 2.13's operator tags (data_dependent_output: "value", dynamic_output_shape: "size"), for evidence that does
# not carry its own torch's (Environment.sync_operators: a trace recorded elsewhere, older saved evidence). A test
# holds it to the installed torch's registry.
SYNC_OPERATORS_TORCH_2_13 = {
    "aten::_local_scalar_dense": "value", "aten::item": "value", "aten::equal": "value", "aten::allclose": "value",
    "aten::nonzero": "size", "aten::argwhere": "size", "aten::masked_select": "size", "aten::index": "size",
    "aten::_unique": "size", "aten::_unique2": "size", "aten::unique_dim": "size", "aten::unique_consecutive": "size",
    "aten::unique_dim_consecutive": "size", "aten::bincount": "size", "aten::repeat_interleave": "size",
    "aten::one_hot": "size", "aten::_ctc_loss": "size", "aten::linalg_lstsq": "size",
}

# --- from manual_attention ------------------------------------------------------------
CAUSAL_BUILDERS = {"tril", "triu", "torch.tril", "torch.triu"}

# --- from optimizer_foreach ------------------------------------------------------------
FUSED_OPTIMIZERS = {"Adam", "AdamW", "SGD", "Adagrad"}

# --- from patterns ------------------------------------------------------------
SCORE_MATMULS = frozenset({"matmul", "torch.matmul", "bmm", "torch.bmm"})
BADDBMM = frozenset({"baddbmm", "torch.baddbmm"})  # baddbmm(bias, q, kᵀ, beta=, alpha=): scores with a scale
EINSUM = frozenset({"torch.einsum", "einsum"})
SOFTMAX = frozenset({"F.softmax", "torch.softmax", "softmax"})
MULTIPLY_SCALES = frozenset({"mul", "torch.mul", "mul_"})
DIVIDE_SCALES = frozenset({"truediv", "torch.div", "div", "div_"})
FILL_MASKS = frozenset({"masked_fill", "masked_fill_", "torch.masked_fill"})  # masked_fill(mask, -inf): the mask marks what to drop
WHERE_MASKS = frozenset({"torch.where"})  # where(keep, scores, -inf)
ADDITIVE_MASKS = frozenset({"add", "torch.add", "add_"})  # scores + (0 / -inf)
CASTS = frozenset({"float", "to", "type_as", "type", "half", "bfloat16"})
# fairseq's and BLOOM's (B * H, T, S) scores seen as (B, H, T, S) to mask, and back (before the softmax or after it)
SCORE_VIEWS = frozenset({"view", "reshape", "torch.reshape"})
DROPOUT = frozenset({"F.dropout", "dropout"})
# Factories whose result depends only on their arguments; with constant arguments, a constant.
CONSTANT_FACTORIES = frozenset({
    "tensor", "as_tensor", "arange", "ones", "zeros", "full", "eye", "linspace", "logspace", "scalar_tensor",
})

# --- from calls ------------------------------------------------------------
PROFILERS = frozenset({"torch.profiler.profile", "torch.autograd.profiler.profile", "torch.autograd.profiler.emit_nvtx"})


# --- graph targets, named as patterns and rules write them ---------------------------------------
_OPERATORS = {getattr(operator, n): n for n in ("add", "sub", "mul", "truediv", "floordiv", "matmul",
                                                   "getitem", "setitem", "neg", "pow", "mod", "iadd", "imul")}


def target_name(target: Any) -> str:
    """How a captured node's target is named: ``matmul``, ``F.softmax``, ``torch.where``, ``add``."""
    if isinstance(target, str):
        return target
    if target in _OPERATORS:
        return _OPERATORS[target]
    name = getattr(target, "__name__", None) or str(target)
    module = getattr(target, "__module__", None) or ""
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"F.{name}"
    if module.startswith("torch"):
        return f"torch.{name}"
    return name


# --- from capture/provenance (host-made tensors) ---------------------------------------
# Factories whose result lives where their device argument says, and on the host without one.
HOST_FACTORIES = frozenset({
    "torch.randint", "torch.rand", "torch.randn", "torch.randperm", "torch.zeros", "torch.ones", "torch.empty",
    "torch.full", "torch.arange", "torch.range", "torch.linspace", "torch.logspace", "torch.eye", "torch.tensor",
    "torch.as_tensor", "torch.from_numpy", "torch.scalar_tensor", "torch.frombuffer",
})
TO_HOST_APIS = frozenset({"Tensor.cpu", "Tensor.numpy"})
TO_DEVICE_APIS = frozenset({"Tensor.cuda", "Tensor.to", "Tensor.xpu", "Tensor.mps"})
