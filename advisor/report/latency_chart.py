"""Layout of the readiness report's chart: p50 and p99 latency (with their intervals) and throughput
against batch size, as SVG coordinates. Presentation only: every value comes from the report."""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor.report.readiness import Readiness

WIDTH, HEIGHT = 720, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 72, 20, 44


@dataclass
class ChartPoint:
    x: float
    batch_size: int
    p50_y: float
    p99_y: float
    p99_low_y: float
    p99_high_y: float
    bar_y: float
    bar_height: float
    p50_ms: float
    p99_ms: float
    throughput: float


@dataclass
class LatencyChart:
    width: int = WIDTH
    height: int = HEIGHT
    points: list[ChartPoint] = field(default_factory=list)
    latency_ticks: list[tuple[float, str]] = field(default_factory=list)
    throughput_ticks: list[tuple[float, str]] = field(default_factory=list)
    budget_y: float | None = None
    bar_width: float = 24.0
    left: int = LEFT
    right: int = WIDTH - RIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM

    @property
    def p50_path(self) -> str:
        return " ".join(f"{p.x:.1f},{p.p50_y:.1f}" for p in self.points)

    @property
    def p99_path(self) -> str:
        return " ".join(f"{p.x:.1f},{p.p99_y:.1f}" for p in self.points)


def latency_chart(readiness: Readiness) -> LatencyChart | None:
    rows = [r for r in readiness.latency if not r.error and r.p99 is not None]
    if not rows:
        return None
    chart = LatencyChart()
    top_ms = max(max(r.p99.ci_high for r in rows), readiness.latency_budget_ms or 0) * 1.1
    top_throughput = max(r.throughput_per_s or 0 for r in rows) * 1.1 or 1.0
    plot_height = chart.bottom - chart.top
    step = (chart.right - chart.left) / len(rows)

    def y_ms(ms: float) -> float:
        return chart.bottom - plot_height * ms / top_ms

    for index, row in enumerate(rows):
        height = plot_height * (row.throughput_per_s or 0) / top_throughput
        chart.points.append(ChartPoint(
            x=chart.left + step * (index + 0.5), batch_size=row.batch_size, p50_y=y_ms(row.p50_ms),
            p99_y=y_ms(row.p99_ms), p99_low_y=y_ms(row.p99.ci_low), p99_high_y=y_ms(row.p99.ci_high),
            bar_y=chart.bottom - height, bar_height=height, p50_ms=row.p50_ms, p99_ms=row.p99_ms,
            throughput=row.throughput_per_s or 0))
    chart.bar_width = min(40.0, step * 0.4)
    chart.latency_ticks = [(y_ms(top_ms * k / 4), f"{top_ms * k / 4:.3g}") for k in range(5)]
    chart.throughput_ticks = [(chart.bottom - plot_height * k / 4, f"{top_throughput * k / 4:.3g}") for k in range(5)]
    if readiness.latency_budget_ms is not None:
        chart.budget_y = y_ms(readiness.latency_budget_ms)
    return chart
