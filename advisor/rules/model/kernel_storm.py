"""Small-kernel storm: the step is many tiny operators, bound by dispatch or launch overhead.

What it detects:
    On CPU, a step where per-op overhead takes at least ``min_overhead_share`` of the time: the
    operator count times the per-op dispatch floor measured on the same machine in the same run
    (the time of one trivial eager op), over the fastest profiler-free step (the least disturbed
    by other load). Both numbers come from
    the same CPU at the same moment, so the verdict holds on a slower or a faster machine; no
    fixed op count or per-op time decides it. The step's work — its FLOPs at the measured matmul
    speed plus the bytes its innermost ops read and write at the measured copy bandwidth — must
    also explain at most ``max_work_share`` of it (a step of big operators is never a storm),
    and a step of fewer than ``min_ops`` operators is too small to judge. A step of at least
    ``min_many_ops`` operators whose work explains at most ``max_many_ops_work_share`` of it is
    reported whatever its dispatch share: the one-op floor understates what an operator costs in
    a training step (autograd's recording, allocation), and twelve thousand operators of a few
    microseconds each, doing almost no work, are what a compiled version removes (the fix
    measures how much). The finding also says
    what the same operator count costs in kernel launches on a GPU, at an assumed
    ``gpu_launch_us`` per launch. On GPU, at least ``min_kernels`` kernels per step, most of
    them shorter than ``short_kernel_us``, with the GPU busy for less than ``max_gpu_busy`` of the
    step: the CPU launches slower than the GPU executes (launch-bound). Names the source lines
    that emit most of the operators.

Why it matters:
    Each eager operator costs a few microseconds of Python and dispatcher work on the host, and
    on GPU a kernel launch of similar cost. When operators do less work than that, adding more
    hardware does nothing; the step is as fast as the host can issue work. A Python loop over
    time steps or a hand-written chain of elementwise ops is the usual cause. A step dominated
    by a few large operators is never reported, however many small ones it also has.

How to fix:
    Fuse: ``torch.compile(model)`` turns elementwise chains into single kernels; on GPU,
    ``torch.compile(model, mode="reduce-overhead")`` adds CUDA graphs, replaying the whole step
    with one launch. Vectorize Python loops (process all time steps, experts or heads in one
    batched op); a recurrent cell looped over time steps is ``nn.GRU`` / ``nn.LSTM``, one fused
    op per layer.

Example:
    Before::

        for t in range(steps):                 # 12 tiny ops per iteration
            c = f[t] * c + i[t] * torch.tanh(g[t])

    After::

        model = torch.compile(model)           # fuses the chain; on GPU add mode="reduce-overhead"
"""

from __future__ import annotations

from collections import Counter
from typing import Iterator

from advisor.evidence import Evidence
from advisor.opnames import RECURRENT_OPS
from advisor.patch.codemods import NoEdit
from advisor.patch.common_sites import model_built_for
from advisor.rulekit.fixing import replace_target
from advisor.rulekit.helpers import runs_compiled
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Margin, Severity, Threshold, Thresholds, rule
from advisor.sources import is_library_path, site_label
from advisor.stats import median, percentile
from advisor.trace.parse import Trace
from advisor.trace.roofline import ITEMSIZE

# A line that emits this many top-level ops per step runs inside a Python loop (a GRU cell over 64
# time steps emits 64 per line; straight-line code emits one per line and call).
# Severity: HIGH when the measure is at most half of its threshold (twice as deep in the storm).
# Bytes per element of the dtypes the profiler records (record_shapes' "Input type").

DOCS = ["https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html",
        "https://pytorch.org/docs/stable/notes/cuda.html#cuda-graphs"]


@rule(
    slug="kernel-storm",
    code="ADV103",
    layer=Layer.MODEL,
    needs=("trace",),
    severity=Severity.MEDIUM,
    thresholds={
        "min_overhead_share": Threshold(
            0.15, "share of the step that operators x the measured dispatch floor take (CPU) before it is reported "
                  "(measured: storms 19-39%, healthy samples 0-12%, conv/attention nets under 1%)"),
        "high_overhead_share": Threshold(0.3, "the same share from which it is HIGH"),
        "max_work_share": Threshold(0.75, "share of the step its FLOPs and bytes explain (CPU), above which the "
                                          "step is work, not overhead"),
        "min_ops": Threshold(64, "operators per step (CPU) below which a step is too small to judge", "count"),
        "min_many_ops": Threshold(1000, "operators per step (CPU) from which a step whose work explains little of it is "
                                        "reported whatever its dispatch share", "count"),
        "max_many_ops_work_share": Threshold(0.5, "share of such a step its FLOPs and bytes may explain (CPU)"),
        "max_mean_op_us": Threshold(10, "mean µs per operator at or below which a step is a storm, when no "
                                        "dispatch floor was measured (a recorded trace)", "µs"),
        "gpu_launch_us": Threshold(5, "assumed host cost of one kernel launch on a GPU, for the CPU audit's "
                                      "estimate (PyTorch dispatch + cudaLaunchKernel)", "µs"),
        "min_kernels": Threshold(100, "GPU kernels per step before the step can be a storm", "count"),
        "short_kernel_us": Threshold(10, "a GPU kernel shorter than this is small", "µs"),
        "min_short_share": Threshold(0.5, "share of kernels that are small (GPU)"),
        "max_gpu_busy": Threshold(0.6, "GPU busy share of the step below which it is launch-bound"),
        "high_fraction": Threshold(0.5, "fraction of max_mean_op_us (a recorded trace) or of max_gpu_busy (GPU) "
                                        "at or below which the storm is HIGH"),
        "loop_ops_per_line": Threshold(8, "operators per step from one line that make it a Python loop (advice: "
                                          "nn.GRU/nn.LSTM or torch.compile)", "count"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    trace = ev.trace
    if trace is None:
        yield Clean(why="no trace")
        return
    if trace.kernels:
        yield from _gpu(ev, trace, th)
    else:
        yield from _cpu(ev, trace, th)


def _cpu(ev: Evidence, trace: Trace, th: Thresholds) -> Iterator[Finding]:
    if runs_compiled(trace):  # the fusing is done: what dispatch is left is the compiled code's own calls
        yield Clean(why="the step runs compiled code already (torch.compile)")
        return
    top = trace.top_ops()
    ops_per_step = _typical_ops_per_step(trace, top)
    step_ms = ev.step_ms
    if ops_per_step < th.min_ops or not step_ms:
        yield (Margin(quantity="operators per step", value=round(ops_per_step, 2), threshold=th.min_ops, noise=0.0)
               if step_ms else Clean(why="the step's time is unknown"))
        return
    mean_op_us = step_ms * 1000 / ops_per_step
    floor_us = ev.env.dispatch_overhead_us if ev.env is not None else None
    work_share = _work_share(ev, trace, step_ms)
    if work_share is not None:
        yield ev.share_margin("share of the step its FLOPs and bytes explain", work_share, th.max_work_share)
    if work_share is not None and work_share > th.max_work_share:
        return  # FLOPs and bytes explain the step: big operators, not overhead
    # many operators doing little work: reported whatever the one-op floor says (it understates a training op)
    many = work_share is not None and ops_per_step >= th.min_many_ops and work_share <= th.max_many_ops_work_share
    if floor_us:
        # Against the fastest timed step: the least disturbed by other load on the machine (a busy
        # core stretches every parallel region of the step, but not the single-op floor).
        quiet_ms = ev.timing.min_ms if ev.timing is not None and ev.timing.min_ms > 0 else step_ms
        share = ops_per_step * floor_us / (quiet_ms * 1000)
        yield ev.share_margin("dispatch share of the step", share, th.min_overhead_share)  # reported when silent too
        if share < th.min_overhead_share and not many:
            return
        high = share >= th.high_overhead_share
    else:
        yield Margin(quantity="mean µs per operator (below it: dispatch-bound)", value=round(mean_op_us, 3),
                     threshold=th.max_mean_op_us, noise=0.0)
        if mean_op_us > th.max_mean_op_us:
            return
        share, high = None, mean_op_us <= th.max_mean_op_us * th.high_fraction
    durations = sorted(o.dur for o in top)
    launches_ms = ops_per_step * th.gpu_launch_us / 1000
    yield Finding(
        severity=Severity.HIGH if high else Severity.MEDIUM,
        message=(
            f"{ops_per_step:g} operators per step, {mean_op_us:.2g} µs each on average (step {step_ms:.3g} ms)"
            + (f": per-op dispatch alone takes {share:.0%} of the step" if share is not None else "")
            + (f" while its FLOPs and bytes explain {work_share:.0%}" if work_share is not None else "")
            + (f": {ops_per_step:g} operators doing little work each, whose own overhead (dispatch, autograd's "
               "recording, allocation) a compiled or fused version removes" if many and share is not None
               and share < th.min_overhead_share else "")
            + _lines_clause(trace, top)
            + f". On a GPU the same operators would cost ~{launches_ms:.2g} ms of kernel launches per step "
              f"(at an assumed {th.gpu_launch_us:g} µs each), whatever the GPU's speed"
        ),
        impact=round(min(1.0, share), 4) if share is not None else None,
        evidence={
            "ops_per_step": ops_per_step,
            "mean_op_us": round(mean_op_us, 3),
            **({"dispatch_share_of_step": round(share, 4), "dispatch_overhead_us": round(floor_us, 3),
                "mean_op_in_dispatch_floors": round(mean_op_us / floor_us, 2)} if share is not None else {}),
            **({"work_share_of_step": round(work_share, 4)} if work_share is not None else {}),
            "gpu_launch_ms_estimate": round(launches_ms, 4),
            "assumed_gpu_launch_us": th.gpu_launch_us,
            "profiled_op_us_p50": round(percentile(durations, 50), 3),
            "profiled_op_us_p90": round(percentile(durations, 90), 3),
            "step_ms": round(step_ms, 4),
            **_forward_call(ev),
        },
        locations=_emitting_lines(trace, top),
        fix=_fix(ev, trace, th),
    )


def _typical_ops_per_step(trace: Trace, top: list) -> float:
    """The operators of a typical profiled step (the median step's count), set against the typical step's time: a
    profiled step that held a rollout between updates is not the step the timing's median describes."""
    if not trace.steps:
        return float(len(top))
    counts = [0] * len(trace.steps)
    for op in top:
        if op.step is not None:
            counts[op.step] += 1
    return median(counts)


def _forward_call(ev: Evidence) -> dict:
    """Where a script calls the model (advisor run): its patch compiles the model where that call's name is built."""
    call = ev.target.forward_call
    return {"forward_call_file": call.file, "forward_call_line": call.line} if call is not None and call.file else {}


def _work_share(ev: Evidence, trace: Trace, step_ms: float) -> float | None:
    """The step's FLOPs at the measured matmul speed plus the bytes its innermost ops touch at the
    measured copy bandwidth, over the step: an upper bound on the useful work (cached data moves
    faster than a 64 MB copy), so overhead is never overstated. None without the measurements."""
    env = ev.env
    if env is None or not env.memory_bandwidth_gbs or not env.matmul_gflops or ev.flops is None or not ev.flops.counted:
        return None
    step_ops = [o for o in trace.ops if o.step is not None]
    parents = {o.parent for o in step_ops if o.parent is not None}
    read = sum(_tensor_bytes(o) for o in step_ops if o.index not in parents) / trace.step_count
    seconds = 2 * read / (env.memory_bandwidth_gbs * 1e9) + ev.flops.total / (env.matmul_gflops * 1e9)
    return seconds * 1000 / step_ms  # reads, and writes of about as much


def _tensor_bytes(op) -> int:
    total = 0
    for dims, dtype in zip(op.input_dims or (), op.input_types or ()):
        if isinstance(dims, (list, tuple)) and dims and all(isinstance(d, int) for d in dims):
            count = 1
            for d in dims:
                count *= d
            total += count * ITEMSIZE.get(dtype, 4)
    return total


def _gpu(ev: Evidence, trace: Trace, th: Thresholds) -> Iterator[Finding]:
    kernels = [k for k in trace.kernels if k.step is not None] if trace.steps else trace.kernels
    per_step = len(kernels) / trace.step_count
    if per_step < th.min_kernels:
        yield Margin(quantity="kernels per step", value=round(per_step, 2), threshold=th.min_kernels, noise=0.0)
        return
    durations = sorted(k.dur for k in kernels)
    short_share = sum(1 for d in durations if d < th.short_kernel_us) / len(durations)
    if short_share < th.min_short_share:
        yield Margin(quantity=f"share of kernels shorter than {th.short_kernel_us:g} µs", value=round(short_share, 4),
                     threshold=th.min_short_share, noise=0.0)
        return
    busy = _busy_share(trace, kernels)
    if busy is not None and busy >= th.max_gpu_busy:  # small kernels, but not launch-bound
        yield Margin(quantity="GPU busy share of the step (above it: not launch-bound)", value=round(busy, 4),
                     threshold=th.max_gpu_busy, noise=0.0)
        return
    busy_text = f", GPU busy {busy:.0%} of the step" if busy is not None else ""
    launch = _launch_stats(trace, kernels)
    unit = "per step" if trace.steps else "in the trace"
    yield Finding(
        severity=Severity.HIGH if (busy is not None and busy < th.max_gpu_busy * th.high_fraction) else Severity.MEDIUM,
        message=(
            f"{per_step:g} GPU kernels {unit}, {short_share:.0%} shorter than {th.short_kernel_us:g} µs "
            f"(median {percentile(durations, 50):.3g} µs){busy_text}: launch-bound"
        ),
        impact=(1 - busy) if busy is not None else None,
        evidence={
            "kernels_per_step": per_step,
            "short_kernel_share": round(short_share, 4),
            "kernel_us_p50": round(percentile(durations, 50), 3),
            "kernel_us_p90": round(percentile(durations, 90), 3),
            **({"gpu_busy_share": round(busy, 4)} if busy is not None else {}),
            **launch,
            "compiled": runs_compiled(trace),
            **_forward_call(ev),
        },
        locations=_emitting_lines(trace, trace.top_ops()),
        fix=_fix(ev, trace, th),
    )


def _launch_stats(trace: Trace, kernels: list) -> dict:
    """Launch delay (launch call to kernel start) and how often launching took longer than running."""
    pairs = [(launch, k) for k in kernels if (launch := trace.launch_of(k)) is not None]
    if not pairs:
        return {}
    delays = sorted(k.ts - r.ts for r, k in pairs)
    return {
        "launch_delay_us_p50": round(percentile(delays, 50), 3),
        "launch_delay_us_p90": round(percentile(delays, 90), 3),
        "launch_slower_than_kernel_share": round(sum(1 for r, k in pairs if r.dur >= k.dur) / len(pairs), 4),
    }


def _busy_share(trace: Trace, kernels: list) -> float | None:
    """GPU busy time over the profiled steps' span (all GPU activity inside the spans)."""
    if not trace.steps:
        return None
    span = sum(s.dur for s in trace.steps)
    busy = sum(trace.gpu_gaps(step)[0] for step in trace.steps)
    return min(busy / span, 1.0) if span > 0 else None


def _user_sites(ops: list) -> Counter:
    """Ops per user source line; the autograd engine's own frame (the backward call) is not the user's."""
    return Counter((o.src.file, o.src.line) for o in ops if o.src is not None and not is_library_path(o.src.file))


def _emitting_lines(trace: Trace, ops: list) -> list[Location]:
    counts = _user_sites(ops)
    return [
        Location.at(file, line, count_per_step=count / trace.step_count,
                    note=f"{count / trace.step_count:g} operators per step from this line")
        for (file, line), count in counts.most_common(5)
    ]


def _lines_clause(trace: Trace, ops: list) -> str:
    counts = _user_sites(ops)
    if not counts:
        return ""
    (file, line), count = counts.most_common(1)[0]
    return f"; {count / len(ops):.0%} of them from {site_label(file, line)}"


def _recurrent(trace: Trace, th: Thresholds) -> bool:
    """sigmoid and tanh emitted from looped lines: a gated recurrent cell written by hand."""
    looped = {site for site, count in _user_sites(trace.top_ops()).items() if count / trace.step_count >= th.loop_ops_per_line}
    names = {o.name for o in trace.top_ops() if o.src is not None and (o.src.file, o.src.line) in looped}
    return all(any(n == op for n in names) for op in RECURRENT_OPS)


def _fix(ev: Evidence, trace: Trace, th: Thresholds) -> Fix:
    looped = any(count / trace.step_count >= th.loop_ops_per_line for count in _user_sites(trace.top_ops()).values())
    compiled = runs_compiled(trace)  # on a GPU: compiled, and still launch-bound
    advice = [] if compiled else ["torch.compile(model) to fuse the small ops"]
    if ev.on_cuda or trace.kernels:
        advice.append('torch.compile(model, mode="reduce-overhead") to replay the step as a CUDA graph')
    if looped:
        advice.append("vectorize the Python loop that emits them (batch the iterations into one op)")
        if _recurrent(trace, th):
            advice.append("a recurrent cell looped over time steps is nn.GRU / nn.LSTM: one fused op per layer")
    if compiled:
        return Fix(summary="; ".join(advice), before="model = torch.compile(Model())",
                   after='model = torch.compile(Model(), mode="reduce-overhead")', docs=DOCS)
    return Fix(
        summary="; ".join(advice),
        before="model = Model()\nout = model(x)",
        after="model = torch.compile(Model())" + ('  # mode="reduce-overhead" on GPU' if not ev.on_cuda else
                                                  '\nmodel = torch.compile(Model(), mode="reduce-overhead")')
              + "\nout = model(x)",
        docs=DOCS,
    )


@check.fix(tolerance=1e-4, what="torch.compile (reduce-overhead on CUDA)")
def fix(target, finding):
    """Compile the model: fuse the small ops (and on CUDA replay them as a CUDA graph)."""
    return replace_target(target, compile_mode="reduce-overhead" if target.device.type == "cuda" else "default")


@check.patch(what="torch.compile where the model is built")
def patch(files, finding):
    """``get_model()`` returns the model compiled; in a script, the model is compiled where the name the
    script calls it by is built (``model = torch.compile(Net())``)."""
    if finding.evidence.get("compiled"):
        raise NoEdit('the model runs compiled already: mode="reduce-overhead" is set at its torch.compile call by hand')
    call_line = finding.evidence.get("forward_call_line")
    if call_line:
        source = files.read(finding.evidence.get("forward_call_file") or files.entry)
        return source.with_torch([source.wrap(model_built_for(source, call_line), "torch.compile({})")])
    source = files.read(files.entry)
    return source.with_torch([source.wrap(source.returned_by("get_model"), "torch.compile({})")])
