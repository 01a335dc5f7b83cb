"""moe-imbalance (ADV120): Mixture-of-experts load imbalance: some experts get most tokens, some none. Its cases:
the bundled samples' saved evidence replayed, then its own."""

from __future__ import annotations

import pytest

from advisor.workload.feed import BATCHES_AHEAD
from advisor.workload.target import load_target
from conftest import SAMPLES, check_rule, line_of, only_finding, slugs, write_model
from evidence_cases import replayed

test_fires_where_the_samples_expect_it, test_is_silent_elsewhere = replayed("moe-imbalance")


@pytest.mark.slow
def test_skewed_router_measured_on_loader_batches(sample_audit):
    finding = only_finding(sample_audit("moe_skewed"), "moe-imbalance")
    assert finding.evidence["measured_on"] == "dataloader" and finding.evidence["forwards"] == BATCHES_AHEAD
    assert sum(finding.evidence["tokens_per_expert"]) == 128 * BATCHES_AHEAD  # every token of the step's batches, top-1
    assert finding.evidence["busiest"] == 0 and finding.evidence["max_over_mean"] > 3
    assert 7 in finding.evidence["idle_experts"]
    assert f"{BATCHES_AHEAD} real batches" in finding.message
    assert finding.locations[0].line == line_of(SAMPLES / "moe_skewed.py", "= expert(x[rows])")  # the dispatch


@pytest.mark.slow
def test_balanced_experts_and_layer_stacks_are_not_imbalanced(sample_audit):
    balanced = sample_audit("moe_layer")
    [group] = balanced.evidence.routing  # routed, measured on get_inputs()
    assert group.source == "synthetic" and sum(group.tokens) == 2 * 4 * 64  # top-2
    assert "moe-imbalance" not in slugs(balanced)
    assert sample_audit("gpt_block").evidence.routing == []  # a ModuleList of blocks sees equal tokens


@pytest.mark.slow
def test_a_router_that_collapsed_onto_one_expert_is_reported_with_its_idle_experts(sample_audit):
    result = sample_audit("moe_collapsed")
    [group] = result.evidence.routing
    assert group.router == "gate" and group.tokens == [256, 0, 0, 0, 0, 0, 0, 0]
    finding = only_finding(result, "moe-imbalance")
    assert finding.evidence["idle_experts"] == [1, 2, 3, 4, 5, 6, 7] and finding.evidence["router"] == "gate"
    assert "routed by gate" in finding.message and "7 expert(s) get none" in finding.message


@pytest.mark.slow
def test_synthetic_routing_is_said_to_be_synthetic(sample_audit):
    evidence = sample_audit("moe_layer").evidence
    skewed = evidence.routing[0].model_copy(update={"tokens": [400, 30, 30, 30, 0, 0, 0, 22]})
    [finding] = check_rule("moe-imbalance", evidence.model_copy(update={"routing": [skewed]}))
    assert "synthetic" in finding.message and finding.evidence["idle_experts"] == [4, 5, 6]


@pytest.mark.slow
def test_skipped_layers_and_chosen_heads_are_not_routing(tmp_path):
    from advisor.capture.routing import measure_routing

    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
                self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 2)})
            def forward(self, x):
                for layer in self.layers[:2]:  # layer drop: the others are skipped whole
                    x = layer(x)
                return self.heads["a"](x)  # one head chosen per task
        def get_model(): return Net()
        def get_inputs(): return torch.randn(16, 8)
    """)
    assert measure_routing(load_target(str(path))) == []


@pytest.mark.slow
def test_a_classifier_as_wide_as_a_layer_stack_is_no_router(tmp_path):
    from advisor.capture.routing import measure_routing

    path = write_model(tmp_path, """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))
                self.classifier = nn.Linear(8, 4)  # 4 classes, as many as layers
            def forward(self, x):
                for layer in self.layers[:2]:  # layer drop: the others are skipped whole
                    x = layer(x)
                return self.classifier(x).softmax(dim=-1)  # a decision, but after the layers ran
        class Heads(nn.Module):
            def __init__(self):
                super().__init__()
                self.select = nn.Linear(8, 2)
                self.heads = nn.ModuleDict({"a": nn.Linear(8, 2), "b": nn.Linear(8, 2)})
            def forward(self, x):
                return self.heads["a"](x) + self.select(x)  # as wide as the heads, but decides nothing
        class Both(nn.Module):
            def __init__(self):
                super().__init__()
                self.net, self.h = Net(), Heads()
            def forward(self, x):
                return self.net(x), self.h(x)
        def get_model(): return Both()
        def get_inputs(): return torch.randn(16, 8)
    """)
    assert measure_routing(load_target(str(path))) == []
