"""rollout-bound (ADV150): The loop spends its time between the model's updates: a rollout or generation. Its
cases: the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

from test_step_log import _logged, _run, recorded_run

from advisor.machine.step_log import RolloutPlace
from advisor.rulekit.rule import Severity
from conftest import SAMPLES
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("rollout-bound")


def test_a_rollout_before_the_first_update_is_named_where_the_window_held_none():
    """Stable-Baselines3's PPO: 2,048 batch-1 calls of the policy, then 320 updates; the window's 20 steps are all
    updates. The rollout is named at LOW (its share of the run was not seen), a batched one is not."""
    evidence = _logged([1.6] * 20)
    first = {"inference_forwards": 2048, "inference_ms": 600.0, "rollout_ms": 850.0, "inference_batch": 1}
    log = evidence.step_log.model_copy(update={"first_rollout": first, "inference_call": ("/w/ppo.py", 5)})
    [finding], _ = _run(evidence.model_copy(update={"step_log": log}), "rollout-bound")
    assert finding.severity == Severity.LOW and finding.evidence["before_first_update"]
    assert "2048 times without grad (batch 1)" in finding.message and finding.locations[0].line == 5
    batched = log.model_copy(update={"first_rollout": {**first, "inference_batch": 16}})
    findings, run = _run(evidence.model_copy(update={"step_log": batched}), "rollout-bound")
    assert findings == [] and run.status == "silent"


def test_the_rollouts_rest_is_named_by_its_places_once_enough_samples_were_taken():
    evidence = recorded_run("rollout_loop")
    script = str(SAMPLES / "scripts" / "rollout_loop.py")
    places = [{"file": script, "line": 70, "running": "rollout_loop.py:step", "seconds": 0.05, "share": 0.62,
               "samples": 80},
              {"file": "/venv/site-packages/on_policy.py", "line": 12, "running": "buffers.py:add", "seconds": 0.02,
               "share": 0.3, "samples": 80},
              {"file": script, "line": 64, "running": "", "seconds": 0.001, "share": 0.02, "samples": 80}]
    log = evidence.step_log.model_copy(update={"rollout_places": [RolloutPlace(**place) for place in places]})
    [finding], _ = _run(evidence.model_copy(update={"step_log": log}), "rollout-bound")
    assert "Between the calls (80 samples of the main thread): 62% at rollout_loop.py:70 (in rollout_loop.py:step" \
        not in finding.message  # the loop's own file: its function is not repeated
    assert "62% at rollout_loop.py:70, 30% at on_policy.py:12 (in buffers.py:add)" in finding.message
    assert [(loc.line, loc.note) for loc in finding.locations[1:]] == [
        (70, "between the model's calls: 62% of the sampled time, in rollout_loop.py:step")]  # a library's: said only
    few = log.model_copy(update={"rollout_places": [RolloutPlace(**{**place, "samples": 12}) for place in places]})
    [finding], _ = _run(evidence.model_copy(update={"step_log": few}), "rollout-bound")
    assert "Between the calls" not in finding.message and len(finding.locations) == 1
