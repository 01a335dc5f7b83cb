"""What one step holds in memory, by kind, as the memory stage measured it (``capture/memory.py``): the rules
that judge growth and capacity read it, and the report shows it (``advisor.evidence`` shares these)."""

from __future__ import annotations

from advisor.records import Field, Record

KINDS = ("parameters", "gradients", "optimizer state", "activations", "inputs", "temporaries")


class HeldMemory(Record):
    """A line of the user's whose tensors, made in the first measured step, were still alive after the last."""

    file: str = ""
    line: int = 0
    bytes: int = 0
    tensors: int = 0


class LargerBatch(Record):
    """The step at a larger batch, measured: what the memory headroom buys."""

    factor: int = 2
    batch_size: int = 0
    step_ms: float = Field(description="median step at the audited batch (the timing stage's)")
    larger_step_ms: float = Field(description="median step at factor x the batch")
    samples_per_s_ratio: float = Field(description="samples/s at the larger batch over the audited one")
    steps: int = Field(default=0, description="steps timed at each batch")


class StepMemory(Record):
    device: str = ""
    method: str = Field(default="", description="how the peak was measured and the kinds told apart")
    steps: int = Field(default=0, description="steps measured")
    peak_bytes: int = Field(default=0, description="the step's peak: the CUDA allocator's, or the kinds' sum on a CPU")
    kinds: dict[str, int] = Field(default_factory=dict, description="bytes by kind (KINDS), each storage counted once")
    step_end_bytes: list[int] = Field(default_factory=list, description="tensor memory Python reaches at each measured "
                                                                        "step's end (and before the first), less the kept "
                                                                        "kinds")
    growth_bytes_per_step: float = Field(default=0.0, description="from before the first measured step to the last's end")
    held: list[HeldMemory] = Field(default_factory=list, description="where the memory that outlived the steps "
                                                                    "was made, most first")
    reserved_bytes: int | None = Field(default=None, description="CUDA: the most the caching allocator held from the "
                                                                 "device over the measured step (the step's blocks, and "
                                                                 "free ones it kept cached)")
    capacity_bytes: int | None = Field(default=None, description="the device's memory (CUDA) or the RAM available")
    capacity_kind: str = ""
    larger_batch: LargerBatch | None = None
    note: str = Field(default="", description="what could not be measured, and why")

    @property
    def held_bytes(self) -> int:
        """What the step takes from the device: its peak, or what the caching allocator reserved for it where more."""
        return max(self.peak_bytes, self.reserved_bytes or 0)

    @property
    def cached_free_bytes(self) -> int:
        """Reserved by the caching allocator beyond the step's peak: blocks its tensors did not fill."""
        return max(0, (self.reserved_bytes or 0) - self.peak_bytes)

    @property
    def peak_share(self) -> float | None:
        """What the step takes from the device over its capacity."""
        return self.held_bytes / self.capacity_bytes if self.capacity_bytes else None


class PeakMemoryAB(Record):
    """A memory fix measured (``verify/memory_ab.py``): each side's peak over the same steps, alternately, and what
    the fix costs the step's time, from interleaved pairs."""

    method: str = Field(default="", description="how each peak was measured (workload/peak_memory.py)")
    baseline_peak_bytes: list[int] = Field(default_factory=list, description="the baseline's peak, step by step")
    candidate_peak_bytes: list[int] = Field(default_factory=list, description="the candidate's, the same steps")
    ratio: float = Field(default=1.0, description="the candidate's highest peak over the baseline's")
    time_ratio: float | None = Field(default=None, description="the candidate's step time over the baseline's "
                                                               "(median of pairs): above 1, what the memory costs")
    time_low: float | None = Field(default=None, description="95% interval of time_ratio, low end")
    time_high: float | None = None

    def peaks_line(self) -> str:
        """One line for every report: the peaks, then the cost."""
        base, cand = max(self.baseline_peak_bytes, default=0), max(self.candidate_peak_bytes, default=0)
        text = f"peak {base / 2**20:.4g} → {cand / 2**20:.4g} MB ({self.ratio:.2f}x)"
        if self.time_ratio is not None:
            text += (f"; the step takes {self.time_ratio:.2f}x as long [{self.time_low:.2f}-{self.time_high:.2f}]"
                     if self.time_low is not None else f"; the step takes {self.time_ratio:.2f}x as long")
        return text
