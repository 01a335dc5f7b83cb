"""A convolutional network run in NCHW where channels_last (NHWC) is faster.

What it detects:
    2-D convolutions whose input is a contiguous NCHW tensor (not ``channels_last``), in a
    model where convolutions (forward and backward) take at least ``min_share`` of the
    step (``min_share_cuda`` on a GPU).

Why it matters:
    Tensor cores (fp16/bf16/TF32 on NVIDIA GPUs) and oneDNN's CPU convolutions work natively
    in NHWC. Given NCHW they either convert the layout around every convolution or choose
    slower kernels. Running the whole network channels_last removes the conversions; PyTorch
    reports 8-35% gains for ResNets with AMP on Volta and newer, and oneDNN gains on CPUs.

How to fix:
    Convert the model once and each input batch:
    ``model = model.to(memory_format=torch.channels_last)`` and
    ``x = x.to(memory_format=torch.channels_last)``. Element-wise ops, BatchNorm and pooling
    keep the format; ops that ``view`` the tensor may need ``reshape`` instead.

Example:
    Before::

        model = ResNet50().cuda()
        out = model(images)

    After::

        model = ResNet50().cuda().to(memory_format=torch.channels_last)
        out = model(images.to(memory_format=torch.channels_last))
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import CONV_2D_MODULES, CONV_WORK_OPS, REDUCED_DTYPES
from advisor.patch.codemods import NoEdit
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.helpers import outermost, slower_than_float32
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule


@rule(
    slug="channels-last",
    code="ADV117",
    layer=Layer.MODEL,
    needs=("graph", "trace"),
    severity=Severity.LOW,
    thresholds={
        "min_share": Threshold(0.25, "share of the step in convolutions before it is reported (CPU)"),
        "min_share_cuda": Threshold(0.10, "share of the step in convolutions before it is reported (CUDA)"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if ev.graph is None or ev.trace is None:
        yield Clean(why="it needs both the graph and the trace")
        return
    nodes = {n.id: n for n in ev.graph.nodes}
    nchw = []
    for node in ev.graph.calls():
        if node.module_type not in CONV_2D_MODULES or not node.target.endswith(("conv2d", "conv_transpose2d")):
            continue
        source = nodes.get(node.args[0]) if node.args else None
        if source is not None and source.shape and len(source.shape) == 4 and source.contiguous \
                and not source.channels_last and source.shape[1] > 1 and source.shape[2] * source.shape[3] > 1:
            nchw.append(node)
    if not nchw:
        yield Clean(why="no 2-D convolution runs on an NCHW tensor (no conv net, or channels_last already)")
        return
    conv_us = ev.trace.median_per_step(outermost(ev.trace, CONV_WORK_OPS))
    share = ev.share_of_step(conv_us)
    if share is None:
        yield Clean(why="the step's time is unknown, so the convolutions' share is too")
        return
    margin = ev.share_margin("convolution share of the step", share, th.min_share_cuda if ev.on_cuda else th.min_share)
    yield margin  # how near it came: reported when the rule stays silent too
    if share < margin.threshold:
        return
    low_precision = ev.target.autocast is not None or any(k in REDUCED_DTYPES for k in ev.target.param_dtypes)
    layers = {n.module_path for n in nchw}
    emulated = _emulated_precision(ev)
    yield Finding(
        severity=Severity.INFO if emulated else Severity.MEDIUM if ev.on_cuda and low_precision else Severity.LOW,
        message=(f"{len(layers)} Conv2d layer(s) run on NCHW tensors while convolutions take {share:.0%} of the step"
                 + ("" if ev.on_cuda else "; on this CPU the gain depends on oneDNN's kernels: the verification "
                                          "measures it")
                 + (f"; but the convolutions run in {emulated}, which this device's roofs put below float32's: the "
                    "precision is the cost here (slow-precision), the layout applies where it is native"
                    if emulated else "")),
        impact=None,  # the gain is a fraction of the convolution time, which verification measures
        margin=margin,
        evidence={"nchw_conv_layers": len(layers), "conv_share_of_step": round(share, 4),
                  "conv_ms_per_step": round(conv_us / 1000, 4), "low_precision": low_precision},
        locations=[Location.at(n.file, n.line, function=f"module {n.module_path}",
                               count_per_step=sum(1 for o in nchw if _site(o) == site),
                               note=f"input {nodes[n.args[0]].shape}")
                   for site, n in {_site(n): n for n in nchw}.items() if n.file][:5],
        fix=Fix(summary="convert the model and its inputs to channels_last: "
                        "model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)",
                docs=["https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html",
                      "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html"
                      "#use-channels-last-memory-format-for-computer-vision-models"]),
    )


def _emulated_precision(ev: Evidence) -> str:
    """The reduced dtype the convolutions compute in where the roofs measured here put it below float32 (emulated);
    empty where they do not, or were not measured."""
    dtype = ev.target.autocast or next((d for d in ("bfloat16", "float16") if ev.target.param_dtypes.get(
        f"torch.{d}", ev.target.param_dtypes.get(d, 0)) > 0), None)
    return dtype if dtype in slower_than_float32(ev) else ""


def _site(node) -> tuple:
    """Where to point: the user's line, or the module when library code (nn.Sequential) called it."""
    return (node.file, node.line) if node.file else (node.module_path,)


@check.fix(tolerance=1e-4, what="channels_last model and inputs")
def fix(target, finding):
    """Layout only; channels_last convolutions sum in another order (1.9e-5 measured on a ResNet)."""
    return replace_target(target, channels_last=True)


@check.patch(what="the model (and a 4-D input built in get_inputs()) in channels_last")
def patch(files, finding):
    """``get_model()`` returns the model in channels_last; ``get_inputs()`` its input too where it returns one
    tensor-building call (a tuple or dict of inputs is left as it is)."""
    import libcst

    source = files.read(files.entry)
    changes = [source.wrap(source.returned_by("get_model"), "{}.to(memory_format=torch.channels_last)")]
    try:
        inputs = source.returned_by("get_inputs")
    except NoEdit:
        inputs = None
    if isinstance(inputs, libcst.Call):
        changes.append(source.wrap(inputs, "{}.contiguous(memory_format=torch.channels_last)"))
    return source.with_torch(changes)
