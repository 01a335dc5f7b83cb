"""Mixture-of-experts load imbalance: some experts get most tokens, some none.

What it detects:
    Token-routed experts — sibling modules of one class and parameter shapes in a ModuleList
    or ModuleDict, called with different numbers of tokens — where the busiest expert gets
    at least ``max_over_mean`` times the mean load, or at least one expert gets no token. When
    a router is recognised (a Linear as wide as the expert list whose output feeds argmax /
    topk / softmax before the experts run), experts it never sends a token to count as idle,
    so a router that collapsed onto one expert is reported too.
    Tokens are counted by hooks on each expert while the model runs forward passes on the
    data loader's real batches when they fit the model's inputs; otherwise on
    ``get_inputs()``, and the finding says the routing was measured on synthetic inputs.

Why it matters:
    Experts are sized for an even share. With expert parallelism the busiest expert's device
    sets the pace of every step and the others wait; with capacity limits tokens beyond the
    capacity are dropped (silently degrading quality); idle experts are parameters that do
    no work. A router that collapses onto a few experts is also a training problem.

How to fix:
    Train with a load-balancing auxiliary loss (Switch/GShard style) or router z-loss, add
    noise or use expert-choice routing; check the router's initialisation and temperature.
    At inference, re-balance expert placement across devices by measured load.

Example:
    Before::

        logits = self.router(x)
        loss = task_loss

    After::

        probs = logits.softmax(-1)
        load = F.one_hot(probs.argmax(-1), n_experts).float().mean(0)
        loss = task_loss + 0.01 * n_experts * (load * probs.mean(0)).sum()   # balance loss
"""

from __future__ import annotations

from typing import Iterator

from advisor.evidence import Evidence
from advisor.rulekit.rule import Clean, Finding, Fix, Layer, Location, Margin, Severity, Threshold, Thresholds, rule


@rule(
    slug="moe-imbalance",
    code="ADV120",
    layer=Layer.MODEL,
    severity=Severity.MEDIUM,
    thresholds={
        "max_over_mean": Threshold(1.5, "busiest expert's tokens over the mean that counts as imbalanced", "ratio"),
        "min_tokens": Threshold(64, "tokens routed in the measured forwards needed to judge", "tokens"),
    },
)
def check(ev: Evidence, th: Thresholds) -> Iterator[Finding]:
    if not ev.routing:
        yield Clean(why="the model holds no mixture of experts whose routing could be measured")
        return
    worst = max((max(g.tokens) / (sum(g.tokens) / len(g.tokens)) for g in ev.routing if sum(g.tokens)), default=0.0)
    yield Margin(quantity="busiest expert's tokens over the mean", value=round(worst, 4), threshold=th.max_over_mean,
                 noise=0.0)
    for group in ev.routing:
        total = sum(group.tokens)
        if total < th.min_tokens:
            continue
        mean = total / len(group.tokens)
        ratio = max(group.tokens) / mean
        idle = [i for i, n in enumerate(group.tokens) if n == 0]
        if ratio < th.max_over_mean and not idle:
            continue
        busiest = max(range(len(group.tokens)), key=group.tokens.__getitem__)
        synthetic = group.source == "synthetic"
        yield Finding(
            message=(f"experts in {group.path} ({len(group.tokens)} x {group.module_type}) are unevenly loaded: "
                     f"expert {busiest} gets {ratio:.1f}x the mean ({max(group.tokens)} of {total} tokens)"
                     + (f", {len(idle)} expert(s) get none ({', '.join(map(str, idle[:8]))}"
                        + (", …" if len(idle) > 8 else "") + ")" if idle else "")
                     + (f", routed by {group.router}" if group.router else "")
                     + (" — measured on get_inputs(), synthetic data: production routing may differ" if synthetic
                        else f" — measured on {group.forwards} real batches from the data loader"
                        if group.source == "dataloader" else f" — measured on {group.forwards} batches of the script's own run")),
            evidence={"experts": len(group.tokens), "tokens_per_expert": group.tokens,
                      "max_over_mean": round(ratio, 3), "idle_experts": idle, "busiest": busiest,
                      "measured_on": group.source, "forwards": group.forwards, "router": group.router or None},
            locations=[Location.at(group.file, group.line, function=group.path,
                                   note="tokens per expert: " + ", ".join(map(str, group.tokens)))]
            if group.file else [],
            fix=Fix(summary="train the router with a load-balancing auxiliary loss (or z-loss, noisy top-k, "
                            "expert-choice routing); place experts across devices by measured load",
                    docs=["https://arxiv.org/abs/2101.03961", "https://arxiv.org/abs/2202.09368"]),
        )


check.advice_only("balancing the experts means retraining the router (an auxiliary loss); "
                  "the outputs change by design, so there is no equal-numerics fix to measure")
