"""The A/B inside one run of a script (advisor/verify/switched.py): the blocks' schedule, when a run ends itself,
the numerics of the probe as the parent judges them, and the power every verdict states. Pure logic: the steps'
times are given, as the window would give them."""

from __future__ import annotations

import math

import pytest
import torch

from advisor.rulekit.engine import load_rules
from advisor.run.window_spec import BlocksSpec, WindowSpec
from advisor.verify.arms import RunVerifier
from advisor.verify.measure import smallest_resolvable, verdict
from advisor.verify.switched import LEAST_PAIRS, Blocks
from advisor.verify.switched_arms import probe_numerics


class SwitchRecord:
    """The switch as the schedule drives it: what it was set to, in order."""

    def __init__(self, queue_depth: int = 0):
        self.on = False
        self.settings: list[bool] = []
        self.queue_depth = queue_depth  # batches a loader's workers hold ready when its arm comes back on
        self.with_data = bool(queue_depth)

    def set(self, on: bool) -> None:
        self.settings.append(on)
        self.on = on


def _blocks(most_pairs: int = 4, distributed: bool = False, deadline: float = 0.0, steps: int = 3,
            queue_depth: int = 0):
    switch = SwitchRecord(queue_depth)
    return switch, Blocks(switch, BlocksSpec(block=steps, most_pairs=most_pairs, deadline=deadline),
                          lambda: distributed)


def _drive(switch: SwitchRecord, blocks: Blocks, fix_ms: float, baseline_ms: float, limit: int = 1000) -> int:
    """Steps until the run ends itself: each step takes its arm's time, the first after a switch 100 ms, and the
    next ``queue_depth`` 1 ms (served by batches its loader's workers made while the other arm ran)."""
    assert blocks.step_ended(None) is False  # the warm-up's last step: the fix goes on, untimed
    previous, since_switch = switch.on, 0
    for step in range(1, limit):
        since_switch = 0 if (switch.on != previous or step == 1) else since_switch + 1
        previous = switch.on
        took = (100.0 if since_switch == 0 else 1.0 if since_switch <= switch.queue_depth
                else fix_ms if switch.on else baseline_ms)
        if blocks.step_ended(took):
            return step
    raise AssertionError("the run never ended")


def test_pairs_alternate_their_order_and_the_step_after_a_switch_is_not_timed():
    switch, blocks = _blocks(most_pairs=4)
    steps = _drive(switch, blocks, fix_ms=5.0, baseline_ms=10.0)
    # fix on for the untimed block; then (off, on), (on, off), (off, on), (on, off): the order alternates
    assert switch.settings == [True, False, True, True, False, False, True, True, False]
    assert blocks.baseline_ms == [10.0] * 4 and blocks.candidate_ms == [5.0] * 4  # 100 ms first steps left out
    assert steps == (3 + 1) * (1 + 2 * 4)  # the untimed block and 4 pairs of blocks, each with its first step


def test_with_a_loader_switched_the_steps_served_by_batches_made_before_the_switch_are_not_timed():
    switch, blocks = _blocks(most_pairs=2, queue_depth=4, steps=3)
    steps = _drive(switch, blocks, fix_ms=5.0, baseline_ms=10.0)
    assert blocks.baseline_ms == [10.0, 10.0] and blocks.candidate_ms == [5.0, 5.0]  # no 1 ms step counted
    assert steps == (3 + 5) * (1 + 2 * 2) and blocks.summary()["settle"] == 5


def test_a_run_ends_itself_once_its_pairs_decide_but_not_before_the_least_pairs():
    switch, blocks = _blocks(most_pairs=50)
    _drive(switch, blocks, fix_ms=5.0, baseline_ms=10.0)
    assert len(blocks.baseline_ms) == LEAST_PAIRS  # 2x every pair: decided at the least pairs


def test_under_torchrun_every_rank_runs_the_most_pairs_whatever_the_verdict():
    switch, blocks = _blocks(most_pairs=9, distributed=True)
    _drive(switch, blocks, fix_ms=5.0, baseline_ms=10.0)
    assert len(blocks.baseline_ms) == 9  # ranks that ended on their own verdicts would leave the others waiting


def test_a_deadline_passed_ends_the_run_at_the_next_pair():
    switch, blocks = _blocks(most_pairs=50, deadline=1.0)  # 1970: long past
    _drive(switch, blocks, fix_ms=5.0, baseline_ms=10.0)
    assert len(blocks.baseline_ms) == 1


def _verifier() -> RunVerifier:
    return RunVerifier(command=[], window=WindowSpec(steps=20), ruleset=load_rules(), budget_s=10, timeout=10)


def test_the_probe_is_judged_with_the_rules_tolerance_and_says_what_it_compared():
    probe = {"reference": [torch.ones(4)], "candidate": [torch.ones(4) * 1.001],
             "what": ["the model's outputs on the same batch"], "skipped": []}
    failed, fields = probe_numerics(_verifier(), probe, 1e-2)
    assert failed is None and "the model's outputs on the same batch match within 0.001" in fields["note"]
    failed, _ = probe_numerics(_verifier(), probe, 1e-4)
    assert failed is not None and failed.status == "numerics-failed" and "more than the 0.0001 allowed" in failed.note


def test_a_probe_that_compared_nothing_says_why():
    closure = "the optimizer step was not compared (it is called with a closure, which would run the model again)"
    failed, fields = probe_numerics(_verifier(), {"reference": [], "candidate": [], "what": [], "skipped": [closure]},
                                                 1e-4)
    assert failed is None and fields["note"] == f"numerics not checked: {closure}"


@pytest.mark.parametrize("low, high", [(1.1, 1.3), (0.7, 1.6), (0.95, 1.05)])
def test_the_power_stated_is_the_smallest_change_an_interval_this_wide_would_decide(low, high):
    resolves = smallest_resolvable((low, high))
    half = math.sqrt(high / low)
    assert verdict(resolves * 1.001, (resolves * 1.001 / half, resolves * 1.001 * half)) == "verified"
    assert verdict(resolves * 0.999, (resolves * 0.999 / half, resolves * 0.999 * half)) != "verified"
    slower = 1 / (resolves * 1.001)
    assert verdict(slower, (slower / half, slower * half)) == "slower"


def test_a_step_in_bfloat16_is_judged_at_its_own_rounding_and_says_so():
    # a compiled step under bf16 autocast (trl's SFT trainer on CPU): reordered bf16 arithmetic differs by about
    # bf16's rounding, which a float32 tolerance would call a numerics failure
    probe = {"reference": [torch.ones(4)], "candidate": [torch.ones(4) * 1.002], "what": ["the model's outputs"],
             "skipped": [], "precision": "bfloat16"}
    failed, fields = probe_numerics(_verifier(), probe, 1e-4)
    assert failed is None and fields["tolerance"] == 1e-2
    assert "the step computes in bfloat16: its rounding, 0.01, is the tolerance, not the fix's 0.0001" in fields["note"]
    probe["candidate"] = [torch.ones(4) * 1.5]  # beyond the rounding: still a failure, saying which tolerance
    failed, _ = probe_numerics(_verifier(), probe, 1e-4)
    assert failed is not None and "more than the 0.01 allowed" in failed.note and "computes in bfloat16" in failed.note
    probe.update(precision=None, candidate=[torch.ones(4) * 1.002])
    failed, _ = probe_numerics(_verifier(), probe, 1e-4)
    assert failed is not None  # in float32 the fix's own tolerance holds


def test_with_pairs_given_a_run_gives_exactly_that_many_whatever_its_verdict():
    switch = SwitchRecord()
    blocks = Blocks(switch, BlocksSpec(block=3, most_pairs=9, deadline=0.0, exact=True), lambda: False)
    _drive(switch, blocks, fix_ms=5.0, baseline_ms=10.0)
    assert len(blocks.baseline_ms) == 9  # decided at 6 pairs, but --pairs asked for 9
