"""A step still getting faster is timed once it holds (workload/settling.py), and the later windows start past it."""

from __future__ import annotations

import os

import pytest
import torch

from advisor.workload.settling import falling
from advisor.workload.timing import time_steps


def test_a_fall_is_a_transient_and_noise_or_a_spike_is_not():
    transient = [100, 99.6, 98.6, 95.2, 95.8, 91.7, 89.4, 88.3, 84.1, 78.5, 74.6, 68.4]  # samples/gpt_block, 2 layers
    assert falling(transient)
    assert not falling(transient[:6])  # its slow start alone: 4% between the halves, under FALL
    assert not falling([26.0, 27.6, 25.7, 26.8, 25.1, 25.4, 27.2, 24.0, 27.0, 26.4])  # the same step, settled
    assert not falling([50.0, 26.0, 27.0, 25.0, 26.0, 27.0, 25.0, 26.0])  # one slow step is not a trend
    assert not falling([26.0, 27.0, 30.0, 35.0, 40.0, 45.0])  # slower and slower: not a warm-up
    assert not falling([100.0, 50.0, 40.0])  # too few to say
    # halves whose medians differ but with no order to it: noise
    assert not falling([30.0, 20.0, 31.0, 22.0, 26.0, 25.0, 21.0, 26.0])


def test_the_rank_correlation_is_spearmans():
    from advisor.workload.settling import rank_correlation

    assert rank_correlation([5.0, 4.0, 3.0, 2.0]) == -1.0
    assert rank_correlation([1.0, 2.0, 2.0, 3.0]) == pytest.approx(0.9486833)  # ties share their mean rank
    assert rank_correlation([7.0, 7.0, 7.0]) == 0.0


class _Script:
    """A timer that reads each call's time from a script (the step itself still runs)."""

    def __init__(self, times: list[float]):
        self.times, self.calls = list(times), 0

    def __call__(self, step) -> float:
        step()
        self.calls += 1
        return self.times.pop(0) if self.times else 26.0


class _Steps:
    def __init__(self):
        self.made, self.copied = 0, []

    def make(self):
        self.made += 1
        return lambda: None

    def copy(self, step):
        self.copied.append(step)
        return lambda: None


def _timed(script: list[float], steps: _Steps):
    return time_steps(steps.make, torch.device("cpu"), warmup=3, min_samples=12, max_samples=24, min_time_s=0.0, budget_s=60.0,
                      copy_settled=steps.copy, timed=_Script(script))


def test_a_falling_first_window_is_warm_up_and_the_next_windows_start_from_its_state():
    # warm-up calls are not timed by the script's timer: the script holds the timed calls only
    fall = [100.0 - 5 * index for index in range(15)]  # 100 down to 30 ms
    steps = _Steps()
    timing = _timed(fall, steps)
    assert timing.settled_after > 0 and timing.unsettled_ms is not None and timing.unsettled_ms > 40
    assert not timing.still_falling
    assert timing.median_ms == pytest.approx(26.0)
    assert steps.made == 1 and len(steps.copied) == len(timing.windows_ms) - 1  # never a fresh copy after it


def test_a_steady_step_is_timed_as_before():
    steps = _Steps()
    timing = _timed([26.0, 27.0, 25.0, 26.5, 26.0, 25.5] * 10, steps)
    assert timing.settled_after == 0 and timing.unsettled_ms is None
    assert steps.copied == [] and steps.made == len(timing.windows_ms)  # each window a fresh copy


@pytest.mark.slow
def test_a_settled_step_is_copied_with_its_optimizer_state_into_memory_of_its_own():
    from advisor.workload.step import copy_of_step, make_step
    from advisor.workload.target import load_target

    sample = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples", "per_tensor_adam.py")
    target = load_target(sample, "train", "cpu", 60.0)
    step = make_step(target, *target.fresh())
    for _ in range(3):
        step()
    model, _, optimizer = step.parts
    copied = copy_of_step(target, step)
    copy_model, _, copy_optimizer = copied.parts
    for original, twin in zip(model.parameters(), copy_model.parameters()):
        assert torch.equal(original, twin) and original.data_ptr() != twin.data_ptr()
    assert set(copy_optimizer.state) == set(copy_model.parameters())  # the copy's state is keyed by its own
    before = [p.detach().clone() for p in model.parameters()]
    copied()
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters()))  # the original is untouched


@pytest.mark.slow
def test_an_lbfgs_step_is_copied_with_what_its_optimizer_keeps_beside_its_state():
    """L-BFGS keeps its parameters in _params, which Optimizer.__getstate__ leaves out of a deep copy: the copy has
    them, the copy's own parameters, and steps (closure_lstm's timing failed on it whenever its step settled)."""
    from advisor.workload.step import copy_of_step, make_step
    from advisor.workload.target import load_target

    sample = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples", "closure_lstm.py")
    target = load_target(sample, "train", "cpu", 60.0)
    step = make_step(target, *target.fresh())
    step()
    copied = copy_of_step(target, step)
    copy_model, _, copy_optimizer = copied.parts
    assert [id(p) for p in copy_optimizer._params] == [id(p) for p in copy_model.parameters()]
    copied()  # L-BFGS's step reads self._params


class _Sides:
    """A timer reading each side's call times from its own script (the side still runs)."""

    def __init__(self, **scripts: list[float]):
        self.scripts = scripts

    def __call__(self, side) -> float:
        side()
        script = self.scripts[side.__name__]
        return script.pop(0) if len(script) > 1 else script[0]


def baseline():
    pass


def candidate():
    pass


def test_the_a_b_pairs_of_a_transient_are_let_go_until_both_sides_hold():
    from advisor.verify.interleave import interleave

    fall = [120.0 - 4 * index for index in range(16)] + [60.0]  # the first timed call of each side comes first
    timer = _Sides(baseline=fall, candidate=[value / 2 for value in fall])
    result = interleave(baseline, candidate, torch.device("cpu"), budget_s=float("inf"), min_pairs=10, max_pairs=10,
                        timed=timer)
    assert result.settled_pairs >= 10 and len(result.baseline_ms) == 10  # exactly the pairs asked for, kept
    assert result.speedup == pytest.approx(2.0) and min(result.baseline_ms) == max(result.baseline_ms) == 60.0


def test_the_a_b_pairs_of_a_steady_step_are_all_kept():
    from advisor.verify.interleave import interleave

    timer = _Sides(baseline=[60.0, 61.0, 59.0, 60.5] * 5 + [60.0], candidate=[30.0, 30.5, 29.5] * 7 + [30.0])
    result = interleave(baseline, candidate, torch.device("cpu"), budget_s=float("inf"), min_pairs=10, max_pairs=10,
                        timed=timer)
    assert result.settled_pairs == 0 and len(result.baseline_ms) == 10
