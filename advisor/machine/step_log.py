"""Every step of an ``advisor run``, as the script's process logged it (``run/logged_steps.py``): the steps that stand
out from the rest and what was in them, and a step time that creeps up through the run.

Only the steps that ran as the script runs alone are judged: the timed ones and, under ``--full``, those after the
window (the warm-up's first steps are slow by nature, and the profiled and watched ones carry advisor's own work).
A step is an outlier when it exceeds the typical (median) step by half of it and by four robust deviations; its
cause is whatever was in it above what a typical step holds: the collector's passes, the wait for data, a save,
the thread waiting for a CPU other processes held, an evaluation, Dynamo compiling; what none of these explains is
said to be unexplained. What the script's own causes account for is their time alone (a short collector pass in a
step another process slowed explains that pass, not the step), less what the wait for a CPU held elsewhere added.
"""

from __future__ import annotations

from advisor.records import Field, Record
from advisor.stats import median, rank_correlation

JUDGED_PHASES = ("timed", "after")
# The defaults of the step rules' thresholds (step-outliers' over_median, deviations, explains; step-drift's
# min_steps), which pass them in: settable with --set like any verdict's number.
OUTLIER_OVER_MEDIAN = 0.5  # an outlier exceeds the median step by at least half of it ...
OUTLIER_DEVIATIONS = 4.0  # ... and by this many robust deviations (1.4826 x the median absolute deviation)
DRIFT_STEPS = 20  # a rise over fewer steps may be a state filling up to its bound (L-BFGS's history)
EXPLAINS = 0.3  # a timed cause explains an outlier when it holds this share of the step's excess
TIMED_CAUSES = (("collector_ms", "garbage collection"), ("data_wait_ms", "waiting for data"),
                ("save_ms", "torch.save"), ("cpu_wait_ms", "another process held the CPU"),
                ("rollout_ms", "a rollout (the model run without grad, and the work between its calls)"))
ROLLOUT = "a rollout"  # a cause that is the loop's shape (rollout-bound judges it), not a stall


class LoggedStep(Record):
    step: int
    phase: str = Field(description="warm-up | timed | profiled | watched | after (advisor's part in the step)")
    ms: float = Field(description="the step's wall time, its wait for data included")
    data_wait_ms: float = 0.0
    collector_ms: float = 0.0
    save_ms: float = 0.0
    cpu_wait_ms: float | None = Field(default=None, description="the step's thread waiting for a CPU held elsewhere")
    compiled_frames: int = 0
    autograd_nodes: int | None = Field(default=None, description="operators the step's thread recorded for backward "
                                                                 "(unknown where torch does not count them)")
    evaluation: bool = False
    inference_forwards: int = Field(default=0, description="calls of the model without grad (from the warm-up's end)")
    inference_ms: float = Field(default=0.0, description="their time")
    rollout_ms: float = Field(default=0.0, description="from the first such call's start to the last's end")
    inference_batch: int | None = Field(default=None, description="their median batch (the first input's size)")


class RolloutPlace(Record):
    """Where a rollout's time between the model's calls went, from the main thread's stack sampled then
    (``run/rollout_sampler.py``): the line of the loop that calls the model, and what ran there."""

    file: str
    line: int
    running: str = Field(default="", description="the innermost functions outside the standard library, torch and "
                                                 "NumPy (``cartpole.py:step``)")
    seconds: float = Field(description="sampled CPU time at this place, over the sampled steps")
    share: float = Field(description="of the samples taken between the model's calls")
    samples: int = Field(default=0, description="samples taken between the model's calls, at every place")


class LineWork(Record):
    file: str
    line: int
    operators: int
    elements: int = Field(description="the elements of its operators' tensor inputs")


class StepWork(Record):
    """What one profiled step asked of torch, from the trace: its operators (those the script called, not those
    they dispatch to) and the elements of their tensor inputs, in all and by the user's line (a backward's at its
    forward's). Work that grows from step to step is the step's own; a step that merely takes longer is not."""

    step: int = Field(description="the profiled step's index in the trace")
    operators: int
    elements: int
    lines: list[LineWork] = Field(default_factory=list, description="the user's lines whose operators ran, most first")


class Outlier(Record):
    step: int
    ms: float
    excess_ms: float = Field(description="above the median step")
    causes: list[str] = Field(default_factory=list, description="what explains the excess, largest first")
    explained_ms: float = Field(default=0.0, description="of the excess, what the script's own causes account for: "
                                                         "their time above a typical step's, or all of it for an "
                                                         "evaluation or a compilation")


class StepLog(Record):
    steps: list[LoggedStep] = Field(default_factory=list)
    inference_call: tuple[str, int] | None = Field(default=None, description="the user's line of the first call of "
                                                                             "the model without grad")
    first_rollout: dict | None = Field(default=None, description="the model's calls without grad before the first "
                                                                 "step (count, time, span, batch): a rollout that comes "
                                                                 "before any update")
    rollout_places: list[RolloutPlace] = Field(default_factory=list, description="where the time between the model's "
                                                                                 "calls went, most first")
    profiled_work: list[StepWork] = Field(default_factory=list, description="what each profiled step asked of torch "
                                                                            "(none without a trace)")

    def judged(self) -> list[LoggedStep]:
        return [step for step in self.steps if step.phase in JUDGED_PHASES]

    def typical(self, quantity: str = "ms") -> float:
        values = [getattr(step, quantity) or 0.0 for step in self.judged()]
        return median(values) if values else 0.0

    def outliers(self, over_median: float = OUTLIER_OVER_MEDIAN, deviations: float = OUTLIER_DEVIATIONS,
                 explains: float = EXPLAINS) -> list[Outlier]:
        """The judged steps far above the typical one (by ``over_median`` of it and ``deviations`` robust deviations),
        each with its causes (those holding ``explains`` of its excess)."""
        judged = self.judged()
        if len(judged) < 5:
            return []
        typical = self.typical()
        spread = 1.4826 * median([abs(step.ms - typical) for step in judged])
        bar = typical + max(over_median * typical, deviations * spread)
        usual = {quantity: self.typical(quantity) for quantity, _ in TIMED_CAUSES}
        return [Outlier(step=step.step, ms=step.ms, excess_ms=round(step.ms - typical, 4),
                        causes=_causes(step, step.ms - typical, usual, explains),
                        explained_ms=round(_explained(step, step.ms - typical, usual), 4))
                for step in judged if step.ms > bar]

    def drift(self, min_steps: int = DRIFT_STEPS) -> tuple[float, float, float] | None:
        """Over the judged steps: (the rank correlation of step time with step number, the last quarter's median
        over the first quarter's, the last quarter's over the third's: still rising at the end, or levelled off);
        None with fewer than ``min_steps``."""
        judged = self.judged()
        if len(judged) < min_steps:
            return None
        times = [step.ms for step in judged]
        quarter = len(times) // 4
        first, third, last = median(times[:quarter]), median(times[-2 * quarter:-quarter]), median(times[-quarter:])
        return rank_correlation(times), last / first if first > 0 else 1.0, last / third if third > 0 else 1.0

    def work_growth(self) -> bool | None:
        """Whether the step's own work grew from each profiled step to the next (more operators, or more elements
        in their inputs); None with fewer than two profiled steps."""
        work = self.profiled_work
        if len(work) < 2:
            return None
        pairs = list(zip(work, work[1:]))
        return all(b.operators > a.operators for a, b in pairs) or all(b.elements > a.elements for a, b in pairs)

    def nodes_growth(self) -> tuple[float, float] | None:
        """Over the judged steps, where each counted its autograd nodes: the first and the last quarter's mean count
        a step, where the count rose with the step number (a rank correlation of 0.5, the last quarter 5% above the
        first: an adaptive solver's evaluations, a loop over a growing list); None otherwise."""
        counts = [step.autograd_nodes for step in self.judged()]
        quarter = len(counts) // 4
        if not quarter or any(count is None for count in counts):
            return None
        first, last = sum(counts[:quarter]) / quarter, sum(counts[-quarter:]) / quarter
        grew = rank_correlation([float(count) for count in counts]) >= 0.5 and last >= 1.05 * first and last > 0
        return (first, last) if grew else None

    def growing_line(self) -> tuple[LineWork, int] | None:
        """The user's line whose operators' inputs grew most from the first profiled step to the last, rising at
        each: its last step's work and its first step's elements; None where no line's work grew."""
        work = self.profiled_work
        if len(work) < 2:
            return None
        by_line = [{(w.file, w.line): w for w in step.lines} for step in work]
        grown = []
        for place, last in by_line[-1].items():
            counts = [step[place].elements if place in step else 0 for step in by_line]
            if all(later > earlier for earlier, later in zip(counts, counts[1:])):
                grown.append((counts[-1] - counts[0], last, counts[0]))
        return max(grown, key=lambda item: item[0])[1:] if grown else None


def _explained(step: LoggedStep, excess_ms: float, usual: dict[str, float]) -> float:
    """The part of the excess the script's own causes account for (not another process's hold on the CPU). The wait
    for a CPU held elsewhere falls inside those causes' wall time as much as anywhere in the step (a batch collated, a
    collector's pass, a save, all slowed alike), so what it adds is taken from theirs: a data wait that another
    process stretched is not the loader's."""
    if step.evaluation or step.compiled_frames:
        return excess_ms
    own = sum(max(0.0, (getattr(step, quantity) or 0.0) - usual[quantity])
              for quantity, _ in TIMED_CAUSES if quantity != "cpu_wait_ms")
    held_elsewhere = max(0.0, (step.cpu_wait_ms or 0.0) - usual["cpu_wait_ms"])
    return min(excess_ms, max(0.0, own - held_elsewhere))


def evaluation_pass(step: LoggedStep) -> bool:
    """The step switched the model to eval mode and read batches from a loader: its calls without grad are an
    evaluation pass (a validation loop), not a rollout (a policy run in eval mode between environment steps)."""
    return step.evaluation and step.data_wait_ms > 0


def _causes(step: LoggedStep, excess_ms: float, usual: dict[str, float], explains: float) -> list[str]:
    # an evaluation pass calls the model without grad too: said as the evaluation it is, not as a rollout
    timed = sorted(((max(0.0, (getattr(step, quantity) or 0.0) - usual[quantity]), name)
                    for quantity, name in TIMED_CAUSES if not (evaluation_pass(step) and quantity == "rollout_ms")),
                   reverse=True)
    causes = [f"{name} ({extra:.3g} ms)" for extra, name in timed if excess_ms > 0 and extra >= explains * excess_ms]
    if step.evaluation and (evaluation_pass(step) or not step.inference_forwards):
        causes.append("an evaluation pass")  # not a rollout run in eval mode (named above as one)
    if step.compiled_frames:
        causes.append(f"Dynamo compiled {step.compiled_frames} frame(s) (a recompilation)")
    return causes or ["unexplained: no collector pass, data wait, save, other process, rollout, evaluation or "
                      "compilation above a typical step's"]
