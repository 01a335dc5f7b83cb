"""The facts that rules read: target, environment, timing, graph, trace, data loader; and the records
every layer shares about them (a Location in the user's source, a Margin against a threshold).

Capture writes these; rules only read them. Every part but the target may be missing (``None``)
when its stage failed or did not apply; rules must check before reading.
"""

from __future__ import annotations

import linecache
from typing import Any

from advisor.evidence.graph_records import FlopCount, GraphBreak, GraphCapture, GraphNode  # noqa: F401 - shared from here
from advisor.evidence.memory_records import StepMemory
from advisor.machine.collector_pauses import CollectorPauses
from advisor.machine.peaks import MachinePeaks
from advisor.machine.state import MeasurementConditions
from advisor.machine.step_log import StepLog
from advisor.records import Field, Record
from advisor.stats import fmean, median, percentile
from advisor.trace.parse import Trace
from advisor.trace.ranks import RankTrace

SHARE_NOISE_FLOOR = 0.1  # a share measured over a few profiled steps moves at least this much (relative)

SNIPPET_CONTEXT = 2  # source lines shown above and below a location


class Location(Record):
    """A place in the user's source: file, line and the text of that line."""

    file: str
    line: int
    code: str = ""
    function: str = ""
    count_per_step: float | None = None
    note: str = ""
    snippet: list[tuple[int, str]] = Field(default_factory=list, description="numbered source lines around it")

    def label(self) -> str:
        if not self.file:
            return f"in {self.function}" if self.function else "(unknown place)"
        return f"{self.file}:{self.line}"

    @classmethod
    def at(cls, file: str, line: int, **fields: Any) -> "Location":
        """A location with its code line read from the source file (when it can be read)."""
        code = linecache.getline(file, line).strip() if file and line > 0 else ""
        snippet = []
        if file and line > 0:
            for number in range(max(1, line - SNIPPET_CONTEXT), line + SNIPPET_CONTEXT + 1):
                text = linecache.getline(file, number)
                if text:
                    snippet.append((number, text.rstrip("\n")))
        return cls(file=file, line=line, code=fields.pop("code", "") or code, snippet=snippet, **fields)


class Margin(Record):
    """The measured value a rule held against its threshold, and how much that value moves run to run.

    A finding whose value lies within its noise of the threshold is borderline: another run of the
    same code may not report it, and ``advisor diff`` says so instead of calling it added or resolved.
    """

    quantity: str
    value: float
    threshold: float
    noise: float = Field(description="the value's run-to-run uncertainty, in the value's unit")

    @property
    def borderline(self) -> bool:
        return abs(self.value - self.threshold) <= self.noise


class StepReading(Record):
    """What one step of an audited script contained, observed (the last whole warm-up step), and what ended it."""

    summary: str = Field(description="the step's calls in words: forwards, backwards, parameter updates, zero_grad")
    recognised_by: str = Field(description="what ended each step, and why that was chosen")
    counts: dict[str, Any] = Field(default_factory=dict, description="the counts the summary is made of")


class TargetInfo(Record):
    model_file: str
    model_class: str = ""
    mode: str = "inference"
    device: str = "cpu"
    training_flag: bool | None = Field(default=None, description="model.training as the user left it")
    param_count: int = 0
    param_dtypes: dict[str, int] = Field(default_factory=dict, description="dtype -> parameter count")
    input_summary: list[str] = Field(default_factory=list)
    batch_size: int | None = Field(default=None, description="first dimension of the first input tensor")
    input_source: str = Field(default="get_inputs()", description="what the step ran on: 'loader' or 'get_inputs()'")
    input_note: str = Field(default="", description="how the step's data was chosen, when there is a loader")
    batch_summary: str = Field(default="", description="the first loader batch the step ran on, in words")
    optimizer: str | None = None
    optimizer_options: dict[str, Any] = Field(default_factory=dict)
    has_dataloader: bool = False
    autocast: str | None = Field(default=None, description="autocast dtype active in the step, if any")
    forward_call: Location | None = Field(default=None, description="where a script calls the model, when that "
                                                                    "line is the user's (not a library's loop)")
    called_module: str = Field(default="", description="the module the script's step calls, where it is not the "
                                                       "model named (a LightningModule whose step calls its parts)")
    called_params: int = Field(default=0, description="that module's parameter count")
    module_types: dict[str, int] = Field(default_factory=dict, description="module class -> count in the model")
    checkpointing_switch: str = Field(default="", description="the model's own activation-checkpointing switch, where "
                                                              "it has one (transformers', timm's), as a call")
    optimizer_param_tensors: int = Field(default=0, description="parameter tensors the optimizer updates")
    optimizer_call: Location | None = Field(default=None, description="where the user's code creates the optimizer "
                                                                      "(the user's line a library made it under)")
    step: StepReading | None = Field(default=None, description="what one step contained (advisor run)")


class Environment(Record):
    python: str = ""
    platform: str = ""
    torch_version: str = ""
    cuda_version: str | None = None
    cudnn_version: int | None = None
    device_name: str = ""
    gpu_capability: tuple[int, int] | None = None
    gpu_count: int = 0
    cpu_model: str = ""
    cpu_cores_logical: int = 0
    cpu_cores_available: int = 0
    cpu_capability: str = ""
    cpu_native_bf16: bool = False
    cpu_amx: bool = False
    torch_threads: int = 0
    torch_interop_threads: int = 0
    omp_num_threads: str | None = None
    cudnn_enabled: bool | None = None
    cudnn_benchmark: bool | None = None
    cudnn_deterministic: bool | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    float32_matmul_precision: str = ""
    deterministic_algorithms: bool = False
    anomaly_detection: bool = False
    dispatch_overhead_us: float | None = Field(
        default=None, description="measured host time of one trivial eager op (per-op overhead floor)")
    memory_bandwidth_gbs: float | None = Field(default=None, description="measured copy bandwidth (64 MB buffer)")
    matmul_gflops: float | None = Field(default=None, description="measured fp32 matmul speed (512x512x512)")
    sync_operators: dict[str, str] = Field(default_factory=dict, description=(
        "aten operators this torch tags as making the host wait for a device result: 'value' "
        "(data_dependent_output) or 'size' (dynamic_output_shape); empty where not read (a recorded trace)"))
    foreach_operators: list[str] = Field(default_factory=list, description=(
        "the operators this torch runs over a list of tensors at once (torch._foreach_<name>), named as aten names "
        "them without a trailing underscore: 'add', 'lerp', 'norm'"))


class Timing(Record):
    timer: str = Field(description="cuda-event or perf_counter")
    warmup_steps: int
    samples_ms: list[float]
    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    cv: float = Field(description="coefficient of variation of the samples")
    conditions: MeasurementConditions | None = Field(default=None, description="the machine while the steps ran")
    remeasured: str = Field(default="", description="the steps were timed again once a contention passed, or "
                                                    "waited for in vain: what was seen, and how long it took")
    windows_ms: list[float] = Field(default_factory=list, description="each timing window's median (a fresh model)")
    windows_cost_s: float = Field(default=0.0, description="what the windows after the first cost: their warm-ups")
    run_noise: float | None = Field(default=None, description="the windows' medians' relative standard deviation: "
                                                              "run-to-run noise; None: fewer than two windows")
    settled_after: int = Field(default=0, description="steps taken as warm-up while still getting faster (settling)")
    unsettled_ms: float | None = Field(default=None, description="the first window's median, while it fell")
    still_falling: bool = Field(default=False, description="still getting faster when the settling's time ran out")

    @classmethod
    def of_samples(cls, samples_ms: list[float], timer: str, warmup: int) -> Timing:
        import statistics  # here: analyze reads no timing (advisor/stats.py's median says why)
        mean, spread = fmean(samples_ms), statistics.pstdev(samples_ms) if len(samples_ms) > 1 else 0.0
        return cls(timer=timer, warmup_steps=warmup, samples_ms=samples_ms, median_ms=median(samples_ms),
                   p25_ms=percentile(samples_ms, 25), p75_ms=percentile(samples_ms, 75), min_ms=min(samples_ms),
                   cv=spread / mean if mean > 0 else 0.0)

    @property
    def iqr_ms(self) -> float:
        return self.p75_ms - self.p25_ms

    @property
    def count(self) -> int:
        return len(self.samples_ms)


class DataLoaderInfo(Record):
    loader_class: str = ""
    batch_size: int | None = None
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    drop_last: bool = False
    dataset_class: str = ""
    dataset_len: int | None = None
    batches_measured: int = 0
    first_batch_ms: float | None = Field(default=None, description="includes worker start-up")
    batch_ms_median: float | None = None
    batch_ms_samples: list[float] = Field(default_factory=list)
    batch_bytes: int | None = Field(default=None, description="bytes of tensors in the first batch")
    measured_in_loop: bool = Field(default=False, description="batch times are the waits of the user's own loop "
                                                              "(advisor run): already what the step waits, workers or not")
    batches_per_epoch: int | None = None
    source_file: str = Field(default="", description="the dataset's __getitem__ (user code) or get_dataloader")
    source_line: int = 0
    created_file: str = Field(default="", description="the DataLoader(...) call in the user's code")
    created_line: int = 0

    def places(self, cost: str = "") -> list[Location]:
        """Where a loader finding points: the ``DataLoader(...)`` call, whose settings the fix changes, then
        (with ``cost``) the dataset's ``__getitem__``, where the time goes."""
        found = []
        if self.created_file:
            found.append(Location.at(self.created_file, self.created_line, function=self.loader_class,
                                     note="the DataLoader(...) call: its settings change here"))
        if self.source_file and (cost or not found) and (self.source_file, self.source_line) != (
                self.created_file, self.created_line):
            found.append(Location.at(self.source_file, self.source_line, function=self.dataset_class,
                                     note=cost or "the dataset"))
        return found


class CallSite(Record):
    """A call of a watched API (torch.save, empty_cache, zero_grad, debug tools) from user code."""

    api: str
    file: str
    line: int
    code: str = ""
    runtime: bool = Field(description="seen running inside the audited step (False: found in the source text)")
    count: float = Field(default=1, description="calls per step (runtime: the mean over the watched steps) or "
                                                "occurrences in the source")
    ms: float = Field(default=0.0, description="time spent in these calls per step (runtime, mean over the watched steps)")
    steps_watched: int = Field(default=1, description="steps watched at runtime (advisor run watches several: a "
                                                      "checkpoint every k steps costs 1/k of its time per step)")
    arguments: dict[str, str] = Field(default_factory=dict, description="selected arguments, as text")


class RoutingGroup(Record):
    """Sibling modules of one structure fed different token counts: experts behind a router."""

    path: str = Field(description="the container, e.g. layers.3.moe.experts")
    module_type: str
    tokens: list[int] = Field(description="tokens routed to each member over the measured forwards")
    forwards: int = Field(description="forward passes measured")
    source: str = Field(description="'dataloader' (real batches), 'script' (the inputs of a script's own first "
                                    "forwards, advisor run) or 'synthetic' (get_inputs())")
    file: str = Field(default="", description="where the members are called (else the member class)")
    line: int = 0
    router: str = Field(default="", description="the layer seen routing tokens to the group, when one was")


class DDPInfo(Record):
    """A DistributedDataParallel model as one rank of ``advisor run -- torchrun`` saw it."""

    file: str = Field(default="", description="where the script built the DDP model")
    line: int = 0
    world_size: int = 1
    backend: str = ""
    find_unused_parameters: bool = False
    unused_parameter_bytes: int = Field(default=0, description="DDP's own count of parameters it found unused")
    steps_watched: int = 0
    steps_with_missing_grads: int = Field(default=0, description="watched steps where a parameter had no gradient")
    parameter_bytes: int = 0
    bucket_cap_bytes: int = 0
    bucket_bytes: list[int] = Field(default_factory=list)
    gradient_as_bucket_view: bool = False
    forward_file: str = Field(default="", description="where the script calls the DDP model (its micro-steps)")
    forward_line: int = 0
    forwards_per_step: float = Field(default=0.0, description="DDP forwards per optimizer step (micro-steps)")
    synced_forwards_per_step: float = Field(default=0.0, description="those that all-reduce (not under no_sync)")
    backward_comm_ms: float | None = Field(default=None, description="DDP's average backward communication time")
    backward_overlap_ms: float | None = Field(default=None, description="of it, overlapped with backward compute")
    backward_compute_ms: float | None = None


class RankSummary(Record):
    """One rank of a multi-rank run: where its step time went."""

    rank: int
    step_ms: float
    data_wait_ms: float = 0.0
    comm_ms: float | None = Field(default=None, description="DDP's backward communication per step (waiting included)")
    compute_ms: float | None = Field(default=None, description="the step outside communication and data wait")
    steps: int = 0


class Evidence(Record):
    """Everything capture learned about one target."""

    __pydantic_config__ = {"arbitrary_types_allowed": True}  # the trace and the ranks, read by pydantic as they are

    target: TargetInfo
    env: Environment | None = None
    timing: Timing | None = None
    graph: GraphCapture | None = None
    graph_error: str | None = None
    trace: Trace | None = None
    data: DataLoaderInfo | None = None
    flops: FlopCount | None = None
    calls: list[CallSite] | None = Field(default=None, description="watched API calls; None when not captured")
    routing: list[RoutingGroup] | None = None
    ranks: list[RankTrace] = Field(default_factory=list, description="every rank's trace, reduced for rank-aware rules")
    rank_summaries: list[RankSummary] = Field(default_factory=list, description="per rank of a torchrun job")
    ddp: DDPInfo | None = None
    collector: CollectorPauses | None = Field(default=None, description="the garbage collector in the timed steps")
    step_log: StepLog | None = Field(default=None, description="every step of an advisor run, what was in it")
    peaks: MachinePeaks | None = Field(default=None, description="the machine's measured roofs: matmul FLOP/s, bandwidth")
    memory: StepMemory | None = Field(default=None, description="what the step holds in memory, by kind")

    def call_sites(self, *apis: str, runtime: bool | None = None) -> list[CallSite]:
        """Watched calls of these APIs (only those seen running, with ``runtime=True``)."""
        return [site for site in self.calls or []
                if site.api in apis and (runtime is None or site.runtime == runtime)]

    @property
    def on_cuda(self) -> bool:
        return self.target.device.startswith("cuda")

    def share_margin(self, quantity: str, share: float, threshold: float) -> Margin:
        """A share of the step against its threshold, with the share's run-to-run noise: the step
        time's spread (its coefficient of variation), at least SHARE_NOISE_FLOOR of the share for the
        profiled time it is divided into."""

        spread = self.timing.cv if self.timing is not None else 0.0
        return Margin(quantity=quantity, value=round(share, 4), threshold=threshold,
                      noise=round(share * max(spread, SHARE_NOISE_FLOOR), 4))

    def share_of_step(self, us_per_step: float) -> float | None:
        """``us_per_step`` of profiled op time as a share of the profiler-free step time, where there is one: the
        profiler's per-op overhead inflates a step of many small ops far more than the large ops measured here."""
        step_ms = self.step_ms
        if not step_ms:
            return None
        return min(1.0, us_per_step / (step_ms * 1000.0))

    @property
    def step_ms(self) -> float | None:
        """Step time from the timing runs; the profiled steps' mean when timing is missing."""
        if self.timing is not None:
            return self.timing.median_ms
        if self.trace is not None and self.trace.steps:
            return self.trace.mean_step_us() / 1000.0
        return None
