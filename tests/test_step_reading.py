"""advisor run reads what one step is from what the script does: one live script per loop shape, each checked for
the step's contents, what ended it, and a timing that is one whole iteration (no bimodal mix of two kinds of
"step")."""

from __future__ import annotations

import sys

import pytest

from advisor.commands.run import RunOptions, run_script
from conftest import SAMPLES, line_of

SCRIPTS = SAMPLES / "scripts"
pytestmark = pytest.mark.slow


def _run(script: str, tmp_path, *args, **options):
    options.setdefault("verify", False)
    return run_script(RunOptions(command=(sys.executable, str(SCRIPTS / script), *args), out_dir=str(tmp_path),
                                 **options)).report


def _unimodal(samples: list[float]) -> bool:
    """No two kinds of step mixed: no timed step far shorter than the typical one (a loss module's call counted as a
    step beside the model's was ~100x shorter). One-sided, because a loaded machine only makes a step longer: a
    preempted step at 3x the median is contention, not a second kind of step."""
    typical = sorted(samples)[len(samples) // 2]
    return min(samples) > typical / 10


def test_a_trainer_with_no_optimizer_steps_at_each_backward_and_finds_its_one_sync(tmp_path):
    report = _run("manual_sgd_lm.py", tmp_path, "--epochs", "1")
    step = report.target.step
    assert report.errors == [] and report.target.mode == "train" and report.target.model_class == "RNNModel"
    assert step.recognised_by.startswith("each backward")
    assert step.counts["forwards"] == {"RNNModel": 1} and step.counts["backwards"] == 1  # the NLLLoss call is no step
    assert step.counts["updated_by_hand"] == 11 and step.counts["zero_grads"] == 1  # every parameter, through .data
    assert _unimodal(report.timing.samples_ms), report.timing.samples_ms
    assert report.quality.state != "contended" or report.quality.timing.others_cores  # never blamed on a quiet machine
    script = SCRIPTS / "manual_sgd_lm.py"
    host_sync = [f for f in report.findings if f.slug == "host-sync"]
    assert host_sync and {loc.line for loc in host_sync[0].locations} == {line_of(script, "ITEM LINE")}
    assert host_sync[0].severity.value == "low"  # a CPU-only run: the cost is a GPU's


def test_a_closure_optimizer_step_holds_every_forward_and_backward_of_its_closure(tmp_path):
    report = _run("lbfgs_sequence.py", tmp_path, "--steps", "8", warmup_steps=2, steps=4)
    step = report.target.step
    assert report.errors == [] and step.recognised_by == "each step of LBFGS"
    assert step.counts["optimizer_steps"] == {"LBFGS": 1} and step.counts["closures"] == 1
    assert step.counts["backwards"] == step.counts["forwards"]["Sequence"] > 1  # max_iter evaluations of the closure
    assert len(report.timing.samples_ms) == 4


def test_evaluation_passes_between_steps_are_not_timed_as_the_step(tmp_path):
    report = _run("eval_every_epoch.py", tmp_path)
    step = report.target.step
    assert report.errors == [] and len(report.timing.samples_ms) == 20  # every epoch evaluates; all were timed
    assert step.counts["forwards"] == {"GraphNet": 1} and step.counts["forwards_without_grad"] == {}
    assert "timed from its return to train mode" in report.stages[0].note
    script = SCRIPTS / "eval_every_epoch.py"
    assert report.target.forward_call.line == line_of(script, "FORWARD LINE")  # the training forward, not the eval's
    # no rule judges the evaluation as the step; rollout-bound may name it as time spent between the updates
    assert all(loc.line != line_of(script, "EVAL LINE") for f in report.findings if f.slug != "rollout-bound"
               for loc in f.locations)


def test_an_rl_loop_steps_once_per_episode_whatever_its_length(tmp_path):
    report = _run("reinforce_episodes.py", tmp_path, "--episodes", "40")
    step = report.target.step
    assert report.errors == [] and step.recognised_by == "each step of Adam"
    assert step.counts["backwards"] == 1 and step.counts["forwards"]["Policy"] > 1  # one forward per environment step
    assert line_of(SCRIPTS / "reinforce_episodes.py", "ITEM LINE") in {
        loc.line for f in report.findings if f.slug == "host-sync" for loc in f.locations}


def test_a_gan_iteration_holds_both_models_and_both_optimizers(tmp_path):
    report = _run("gan_train.py", tmp_path, "--iterations", "30")
    step = report.target.step
    assert report.errors == [] and "the one stepping least often of the script's 2 optimizers" in step.recognised_by
    assert sum(step.counts["optimizer_steps"].values()) == 2 and step.counts["backwards"] == 2
    assert sum(step.counts["forwards"].values()) == 4  # the generator once, the critic three times


def test_gradient_accumulation_is_one_step_of_several_backwards(tmp_path):
    report = _run("chain_train.py", tmp_path, "--steps", "30", "--accumulate", "2")
    step = report.target.step
    assert report.errors == [] and step.counts["backwards"] == 2 and len(step.counts["optimizer_steps"]) == 1


def test_an_inference_loop_steps_at_each_call_of_the_model(tmp_path):
    report = _run("infer_loop.py", tmp_path)
    step = report.target.step
    assert report.errors == [] and report.target.mode == "inference"
    assert step.recognised_by.startswith("each call of") and step.counts["backwards"] == 0
