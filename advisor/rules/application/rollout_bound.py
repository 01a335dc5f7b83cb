"""The loop spends its time between the model's updates: a rollout or generation.

What it detects:
    In ``advisor run``, steps (optimizer steps) whose time goes mostly to calling the model without
    grad between its updates — a reinforcement-learning rollout (the policy called once per
    environment step), generation — at least ``min_share`` of the judged steps' time from the first
    such call of a step to its last. A step that switched the model to eval mode and read batches
    from a loader holds an evaluation pass, which step-outliers names (a rollout run in eval mode,
    as Stable-Baselines3 runs its policy's, reads no loader: it stays a rollout). The model itself is watched from the
    warm-up's end (two hooks on it, not on its modules): each step logs its calls without grad,
    their time, their batch and the span between the first and the last. A rollout whose calls each
    take a batch of at most ``small_batch`` (one environment's observation) is a storm of small
    calls the environment could batch. Where the time between the calls goes is read from the main
    thread's stack, sampled during the rollouts outside the timed steps: each place is the line of
    the loop that calls the model, with the function running there (an environment's ``step``, a
    buffer's ``add``), named once ``min_samples`` samples were taken.

Why it matters:
    The update is what the hardware is for; a rollout of batch-1 forwards keeps it idle: each call
    pays Python, the dispatcher and (on a GPU) a launch per operator for one observation, and the
    environment's own steps run in between on the host. Speeding up the update cannot shorten a
    loop whose rollout takes most of it.

How to fix:
    Step several environments together and call the policy once per step of all of them
    (``gymnasium.vector.SyncVectorEnv`` or ``AsyncVectorEnv``, ``n_envs`` in Stable-Baselines3, a
    vectorised environment in CleanRL): each forward then takes a batch of observations. Move a
    slow environment into worker processes (``AsyncVectorEnv``). For generation, batch the prompts;
    for evaluation, evaluate less often or on fewer batches.

Example:
    Before::

        env = gym.make("CartPole-v1")
        for _ in range(2048):
            action = policy(torch.as_tensor(obs)[None])       # batch 1
            obs, reward, *_ = env.step(action)

    After::

        envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 16)
        for _ in range(2048 // 16):
            actions = policy(torch.as_tensor(obs))            # batch 16
            obs, rewards, *_ = envs.step(actions)
"""

from __future__ import annotations

import os
from typing import Iterator

from advisor.evidence import Evidence
from advisor.machine.step_log import evaluation_pass
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Severity, Threshold, Thresholds, rule
from advisor.sources import is_library_path, site_label
from advisor.stats import median

BATCH_ADVICE = ("batch the rollout: step n environments together (gymnasium.vector.SyncVectorEnv / AsyncVectorEnv, "
                "n_envs in Stable-Baselines3) and call the model once per step of all of them")
DOCS = ["https://gymnasium.farama.org/api/vector/",
        "https://stable-baselines3.readthedocs.io/en/master/guide/vec_envs.html"]


@rule(
    slug="rollout-bound",
    code="ADV150",
    layer=Layer.APPLICATION,
    needs=("step_log",),
    severity=Severity.MEDIUM,
    high_at="high_share",
    thresholds={
        "min_share": Threshold(0.3, "share of the judged steps' time in the model's calls without grad and the "
                                    "work between them"),
        "high_share": Threshold(0.6, "the same share from which the finding is high"),
        "small_batch": Threshold(4, "a batch at or below which each call is one environment's (or a few)", "count"),
        "min_calls": Threshold(16, "calls without grad per rollout from which batching them is advised", "count"),
        "min_samples": Threshold(20, "samples of the main thread between the model's calls before their places are "
                                     "named", "count"),
        "min_place_share": Threshold(0.05, "share of the sampled time between the calls a named place holds"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    judged = ev.step_log.judged()
    total = sum(step.ms for step in judged)
    rollouts = [step for step in judged if step.inference_forwards and not evaluation_pass(step)]
    if (not rollouts or not total) and (first := _first_rollout(ev, th, judged)) is not None:
        yield first
        return
    if not rollouts or not total:
        yield Clean(why=f"no call of the model without grad between its updates in the {len(judged)} judged steps")
        return
    rollout_ms = sum(step.rollout_ms for step in rollouts)
    share = rollout_ms / total
    margin = ev.share_margin("share of the judged steps' time in calls of the model without grad", share,
                             th.min_share)
    yield margin
    if share < th.min_share:
        return
    calls = sum(step.inference_forwards for step in rollouts)
    model_ms = sum(step.inference_ms for step in rollouts)
    batches = [step.inference_batch for step in rollouts if step.inference_batch is not None]
    batch = int(median(batches)) if batches else None
    per_rollout = calls / len(rollouts)
    small = batch is not None and batch <= th.small_batch and per_rollout >= th.min_calls
    updates = total - rollout_ms
    message = (f"{share:.0%} of the judged steps' time is spent between the model's updates: {len(rollouts)} of "
               f"{len(judged)} steps ran it {per_rollout:g} times without grad"
               + (f" (batch {batch})" if batch is not None else "")
               + f", {rollout_ms:.4g} ms in all, of which the model's own calls took {model_ms:.4g} ms and the work "
                 f"between them (an environment, Python) the rest; the updates took {updates:.4g} ms")
    if small:
        message += (f". Each call carries {batch} observation(s): stepping several environments together would give "
                    "every forward a batch")
    site = ev.step_log.inference_call
    places, where = _places(ev, th)
    yield Finding(
        message=message + where,
        impact=share,
        margin=margin,
        evidence={"rollout_share": round(share, 4), "rollout_ms": round(rollout_ms, 3), "model_calls_ms":
                  round(model_ms, 3), "calls_per_rollout": round(per_rollout, 2), "batch": batch,
                  "rollout_steps": len(rollouts), "judged_steps": len(judged), "small_batches": small},
        locations=[Location.at(site[0], site[1], note=f"the model called without grad ({per_rollout:g} times a "
                                                        f"rollout{f', batch {batch}' if batch is not None else ''})")]
        + places if site else places,
        fix=Fix(summary=(BATCH_ADVICE if small else
                         "the loop's time is in its rollout (or generation, evaluation): shorten or batch it; the "
                         "updates cannot make the loop faster than it"), docs=DOCS),
    )


def _first_rollout(ev: Evidence, th: Thresholds, judged: list) -> Finding | None:
    """A rollout before the first update, where the judged steps held none (one rollout feeds hundreds of updates:
    Stable-Baselines3's PPO, 2,048 environment steps, then 320 minibatch steps): named with its calls and batch, at
    LOW, since how it alternates with the updates was not seen (``--full`` sees it)."""
    first = ev.step_log.first_rollout or {}
    calls, batch = first.get("inference_forwards", 0), first.get("inference_batch")
    if calls < th.min_calls or batch is None or batch > th.small_batch:
        return None
    rollout_ms, model_ms = first.get("rollout_ms", 0.0), first.get("inference_ms", 0.0)
    typical = median([step.ms for step in judged]) if judged else None
    site = ev.step_log.inference_call
    places, where = _places(ev, th)
    return Finding(
        severity=Severity.LOW,
        message=(f"before its first update the script ran the model {calls} times without grad (batch {batch}) over "
                 f"{rollout_ms:.4g} ms, of which the model's own calls took {model_ms:.4g} ms: a rollout of "
                 f"{batch} observation(s) a call"
                 + (f", against a typical update step of {typical:.3g} ms" if typical else "")
                 + "; the judged steps held no other, so how the rollouts alternate with the updates was not seen "
                   "(--full runs the script to its end). Stepping several environments together would give every "
                   "forward a batch" + where),
        impact=None,
        evidence={"rollout_ms": round(rollout_ms, 3), "model_calls_ms": round(model_ms, 3), "calls_per_rollout": calls,
                  "batch": batch, "before_first_update": True, "small_batches": True},
        locations=[Location.at(site[0], site[1], note=f"the model called without grad ({calls} times, batch {batch})")]
        + places if site else places,
        fix=Fix(summary=BATCH_ADVICE, docs=DOCS),
    )


def _places(ev: Evidence, th: Thresholds) -> tuple[list[Location], str]:
    """Where the time between the model's calls went (the main thread sampled then): the user's lines among them as
    locations, and a clause naming each place that holds ``min_place_share`` (a library's line too: what it runs is
    said), or nothing where too few samples were taken to say."""
    named = [place for place in ev.step_log.rollout_places if place.share >= th.min_place_share][:3]
    samples = ev.step_log.rollout_places[0].samples if ev.step_log.rollout_places else 0
    if not named or samples < th.min_samples:
        return [], ""
    said = ", ".join(f"{place.share:.0%} at {site_label(place.file, place.line)}"
                     + (f" (in {place.running})" if place.running and not place.running.startswith(
                         os.path.basename(place.file) + ":") else "") for place in named)
    locations = [Location.at(place.file, place.line, note=f"between the model's calls: {place.share:.0%} of the "
                                                          f"sampled time" + (f", in {place.running}" if place.running
                                                                             else ""))
                 for place in named if not is_library_path(place.file)]
    return locations, f". Between the calls ({samples} samples of the main thread): {said}"


@check.advice_only
def expected(finding: Finding) -> str:
    """Vectorising the user's environments changes the script: say what the rollout costs."""
    return (f"no automatic rewrite (it changes how the script steps its environments); the rollout holds "
            f"{finding.evidence.get('rollout_share', 0):.0%} of the steps' time, which batching the calls shortens"
            if "rollout_share" in finding.evidence else "no automatic rewrite (it changes how the script steps its "
            "environments); the rollout's share of the run was not seen in the window")
