"""Layout of the report's roofline chart: each operator group at its arithmetic intensity (x) and achieved
FLOP/s (y), both on log scales, under the machine's roofs (the bandwidth's slope, each dtype's matmul peak).
Presentation only: every value comes from the report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

WIDTH, HEIGHT = 760, 380
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 20, 48
ROOF_COLOURS = {"float32": "#3f6fd8", "tf32": "#7b5cd6", "bfloat16": "#2e7d32", "float16": "#ef6c00", "float64": "#8d6e63"}


@dataclass
class RoofLine:
    dtype: str
    path: str  # SVG points of the slope, then the flat peak
    label_x: float
    label_y: float
    colour: str
    peak: float


@dataclass
class RooflinePoint:
    x: float
    y: float
    radius: float
    colour: str
    title: str
    index: int


@dataclass
class RooflineChart:
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM
    roofs: list[RoofLine] = field(default_factory=list)
    points: list[RooflinePoint] = field(default_factory=list)
    x_ticks: list[tuple[float, str]] = field(default_factory=list)
    y_ticks: list[tuple[float, str]] = field(default_factory=list)


def roofline_chart(roofline: Any) -> RooflineChart | None:
    """The chart of a report's ``Roofline`` (schema.py imports the renderers: this module does not import it)."""
    peaks = roofline.peaks
    plotted = [(number, rate) for number, rate in enumerate(roofline.operators, 1)
               if rate.intensity and rate.achieved_flops_per_s > 0]
    bandwidth = peaks.bandwidth_bytes_per_s
    if not plotted or bandwidth <= 0 or not peaks.flops_per_s:
        return None
    chart = RooflineChart()
    intensities = [rate.intensity for _, rate in plotted] + [p / bandwidth for p in peaks.flops_per_s.values()]
    x_low = 10 ** math.floor(math.log10(min(intensities) / 2))
    x_high = 10 ** math.ceil(math.log10(max(intensities) * 2))
    rates = [rate.achieved_flops_per_s for _, rate in plotted] + [x_low * bandwidth]
    y_low = 10 ** math.floor(math.log10(min(rates) / 2))
    y_high = 10 ** math.ceil(math.log10(max(peaks.flops_per_s.values()) * 1.5))

    def x_at(value: float) -> float:
        return chart.left + (chart.right - chart.left) * math.log10(value / x_low) / math.log10(x_high / x_low)

    def y_at(value: float) -> float:
        return chart.bottom - (chart.bottom - chart.top) * math.log10(max(value, y_low) / y_low) / math.log10(y_high / y_low)

    for dtype, peak in sorted(peaks.flops_per_s.items(), key=lambda item: item[1]):
        ridge = peak / bandwidth
        start = max(x_low, y_low / bandwidth)
        chart.roofs.append(RoofLine(
            dtype=dtype, path=f"{x_at(start):.1f},{y_at(start * bandwidth):.1f} {x_at(ridge):.1f},{y_at(peak):.1f} "
                              f"{x_at(x_high):.1f},{y_at(peak):.1f}",
            label_x=x_at(x_high) - 4, label_y=y_at(peak) - 5, colour=ROOF_COLOURS.get(dtype, "#8a94a6"), peak=peak))
    for number, rate in plotted:
        where = f" at {rate.file.rsplit('/', 1)[-1]}:{rate.line}" if rate.file else ""
        chart.points.append(RooflinePoint(
            x=x_at(rate.intensity), y=y_at(rate.achieved_flops_per_s), index=number,
            radius=3 + 9 * math.sqrt(rate.share_of_step), colour="#c62828" if rate.efficiency < 0.25 else "#37474f",
            title=(f"{number}. {rate.op}{' (backward)' if rate.backward else ''}{where}: "
                   f"{rate.achieved_flops_per_s / 1e9:.3g} GFLOP/s, {rate.efficiency:.0%} of its roof, "
                   f"{rate.share_of_step:.1%} of the step")))
    decades = range(int(round(math.log10(x_low))), int(round(math.log10(x_high))) + 1)
    chart.x_ticks = [(x_at(10.0 ** d), f"{10.0 ** d:g}") for d in decades]
    chart.y_ticks = [(y_at(10.0 ** d), _flops_label(10.0 ** d))
                     for d in range(int(round(math.log10(y_low))), int(round(math.log10(y_high))) + 1)]
    return chart


def _flops_label(value: float) -> str:
    for scale, unit in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g}"
