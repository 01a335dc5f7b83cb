"""What this machine can do at best: matrix-multiply FLOP/s per dtype and memory bandwidth, the roofs each
operator's achieved rate is held against (``trace/roofline.py``).

Measured once per machine, torch version and thread count by ``capture/calibrate.py`` (a few large matmuls per
dtype and a large copy, best of several) and cached; a GPU's published datasheet figures are kept beside the
measurement, and stand in for it only where it could not be made. A published peak is a ceiling no real matmul
reaches (clock boost, ideal shapes): the measured one is the roof an operator can be expected to approach.
"""

from __future__ import annotations

from advisor.machine.state import MeasurementConditions
from advisor.records import Field, Record

# Dense (no sparsity) datasheet peaks: FLOP/s per dtype ("float32" without TF32; "float64" the FP64 tensor or
# matrix cores' where the datasheet gives them, as a DGEMM uses them) and memory bandwidth, bytes/s. A dtype the
# datasheet does not give (bf16 on a V100 or T4, FP64 on the A10, L4 and T4) is left out: not judged there.
# Keys are matched as substrings of torch.cuda.get_device_name(), longest first.
PUBLISHED: dict[str, tuple[dict[str, float], float]] = {
    "H200": ({"float32": 67e12, "tf32": 494e12, "bfloat16": 989e12, "float16": 989e12, "float64": 67e12}, 4.8e12),
    "H100 PCIe": ({"float32": 51e12, "tf32": 378e12, "bfloat16": 756e12, "float16": 756e12, "float64": 51e12},
                  2.0e12),
    "H100": ({"float32": 67e12, "tf32": 494e12, "bfloat16": 989e12, "float16": 989e12, "float64": 67e12}, 3.35e12),
    "A100-SXM4-80GB": ({"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12, "float16": 312e12,
                        "float64": 19.5e12}, 2.039e12),
    "A100": ({"float32": 19.5e12, "tf32": 156e12, "bfloat16": 312e12, "float16": 312e12, "float64": 19.5e12},
             1.555e12),
    "A10": ({"float32": 31.2e12, "tf32": 62.5e12, "bfloat16": 125e12, "float16": 125e12}, 0.6e12),
    "L4": ({"float32": 30.3e12, "tf32": 60e12, "bfloat16": 121e12, "float16": 121e12}, 0.3e12),
    "V100": ({"float32": 15.7e12, "float16": 125e12, "float64": 7.8e12}, 0.9e12),
    "T4": ({"float32": 8.1e12, "float16": 65e12}, 0.32e12),
    "MI300X": ({"float32": 163.4e12, "bfloat16": 1307e12, "float16": 1307e12, "float64": 163.4e12}, 5.3e12),
    "MI250": ({"float32": 47.9e12, "bfloat16": 362e12, "float16": 362e12}, 3.2e12),
}


class MachinePeaks(Record):
    device: str = Field(description="the device measured: the CPU's or GPU's name")
    flops_per_s: dict[str, float] = Field(default_factory=dict, description="best matmul FLOP/s per dtype")
    bandwidth_bytes_per_s: float = Field(default=0.0, description="best memory bandwidth (a large copy)")
    source: str = Field(default="measured", description="measured | cached (measured earlier) | published | "
                                                        "contended (measured beside other work: this audit's only)")
    threads: int = Field(default=0, description="intra-op threads the CPU measurement ran with")
    torch_version: str = ""
    published_flops_per_s: dict[str, float] = Field(default_factory=dict, description="the datasheet's, for a GPU")
    published_bandwidth_bytes_per_s: float = 0.0
    seconds: float = Field(default=0.0, description="what measuring took (0 when cached)")
    note: str = Field(default="", description="why the datasheet's figures stand in, when they do")
    measured_at: str = Field(default="", description="when the roofs were measured (UTC, ISO 8601)")
    machine: str = Field(default="", description="what they hold for: the device, its instruction set or driver, "
                                                 "torch and the thread count (the cache's key)")
    conditions: MeasurementConditions | None = Field(default=None, description="the machine while they were measured")
    contended: list[str] = Field(default_factory=list, description="why they may be below this machine's: other "
                                                                   "work beside the measurement (never cached)")

    def provenance(self) -> str:
        """Where the roofs came from, in a sentence of the report's."""
        when = f" on {self.measured_at[:16].replace('T', ' ')} UTC" if self.measured_at else ""
        if self.source == "published":
            return f"the datasheet's figures for {self.device} ({self.note})" if self.note else \
                f"the datasheet's figures for {self.device}"
        if self.source == "contended":
            return (f"measured on this machine during this audit beside other work ({'; '.join(self.contended)}): "
                    "perhaps below its roofs, used for this audit only and not cached")
        read = self.conditions is not None and self.conditions.others_cores is not None  # the CPU shares were read
        quiet = " on a quiet machine" if read and not self.contended else ""
        return (f"measured{quiet}{when}" + (" and cached" if self.source == "cached" else "")
                + (f" for {self.machine.replace('|', ', ')}" if self.machine else ""))

    def flops_for(self, dtype: str) -> float:
        """The matmul roof for an operator computing in ``dtype`` (float32's where that dtype was not measured)."""
        return self.flops_per_s.get(dtype) or self.flops_per_s.get("float32", 0.0)


def published_peaks(device_name: str) -> tuple[dict[str, float], float] | None:
    """The datasheet's (FLOP/s per dtype, bytes/s) of a known GPU, by its name; None for any other device."""
    for key in sorted(PUBLISHED, key=len, reverse=True):
        if key in device_name:
            return PUBLISHED[key]
    return None
