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
    capacity_bytes: int | None = Field(default=None, description="the device's memory (CUDA) or the RAM available")
    capacity_kind: str = ""
    larger_batch: LargerBatch | None = None
    note: str = Field(default="", description="what could not be measured, and why")

    @property
    def peak_share(self) -> float | None:
        return self.peak_bytes / self.capacity_bytes if self.capacity_bytes else None
