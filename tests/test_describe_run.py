"""What advisor run reads of the script's model once its window ends: a copy for the stages that must run the model
again, however the model's library keeps autograd's results, and each part's failure said, never the run's."""

from __future__ import annotations

import copy

import pytest
import torch

from advisor.script.describe_run import Missing
from advisor.workload.model_copy import model_copy


class Held:
    """An object of the model's own, holding a non-leaf tensor two levels down (a policy's last distribution)."""

    def __init__(self, logits: torch.Tensor):
        self.distribution = torch.distributions.Categorical(logits=logits, validate_args=False)


class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(4, 3)
        self.last = None

    def forward(self, x):
        logits = self.head(x)
        self.last = Held(logits)
        return logits


def test_a_model_holding_autograd_results_deep_in_its_objects_is_copied_with_them_detached():
    model = Policy()
    model(torch.randn(2, 4)).sum().backward()
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(model)  # what deepcopy alone says of it
    twin = model_copy(model)
    held = twin.last.distribution.logits
    assert held.grad_fn is None and torch.equal(held, model.last.distribution.logits)
    assert model.last.distribution.logits.grad_fn is not None  # the script's own model keeps its history
    assert twin.head.weight is not model.head.weight and torch.equal(twin.head.weight, model.head.weight)
    assert isinstance(twin.head.weight, torch.nn.Parameter) and twin.head.weight.requires_grad
    assert torch.Tensor not in copy._deepcopy_dispatch  # deepcopy as it was, for the script's own copies


def test_each_part_that_fails_is_named_with_its_facts_and_the_rest_goes_on(tmp_path):
    class Window:
        written: dict = {}

        def write(self, name, payload):
            self.written[name] = payload

    window = Window()
    missing, ran = Missing(window), []
    missing.attempt("graph", "the model's graph (the graph rules)", lambda: 1 / 0)
    missing.attempt("optimizer", "the optimizer's settings", lambda: ran.append("optimizer"))
    missing.write()
    assert ran == ["optimizer"]
    assert window.written["missing.json"] == {"parts": [{"part": "graph", "facts": "the model's graph (the graph rules)",
                                                         "message": "ZeroDivisionError: division by zero"}]}


def test_a_call_is_kept_with_its_keyword_arguments_detached_and_copied():
    """What the graph capture replays of a model called as model(**batch): the same names, the same values, none of
    them the script's own tensors (it may change them in place after the call)."""
    from advisor.script.recorded_calls import RecordedCall, kept

    ids = torch.arange(6).reshape(2, 3)
    weights = torch.ones(3, requires_grad=True) * 2
    call = RecordedCall(kept((weights,)), kept({"input_ids": ids, "options": {"mask": ids > 2}, "labels": None}))
    ids.add_(100)  # the script's own batch, changed after the call
    assert torch.equal(call.kwargs["input_ids"], torch.arange(6).reshape(2, 3)) and call.kwargs["labels"] is None
    assert call.kwargs["options"]["mask"].sum() == 3 and call.args[0].grad_fn is None


def test_a_weight_normed_model_is_copied_and_its_copy_computes_what_the_original_does():
    """weight_norm keeps each layer's weight as autograd's result of two parameters: deepcopy refuses the model
    from the start; the copy holds the weight detached, and its own hook computes it again from the copied
    parameters, so outputs and gradients match the original's."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model = torch.nn.utils.weight_norm(torch.nn.Linear(8, 4))
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(model)
    twin = model_copy(model)
    x = torch.randn(3, 8)
    model(x).square().sum().backward()
    twin(x).square().sum().backward()
    assert twin.weight.grad_fn is not None  # computed again by the copy's own hook, from the copy's parameters
    torch.testing.assert_close(twin.weight_v.grad, model.weight_v.grad)
    assert twin.weight_v is not model.weight_v and model.weight.grad_fn is not None  # the original: untouched


def test_a_keyword_only_weight_normed_sample_is_read_in_every_stage():
    """samples/weight_norm_keywords.py, audited: called with the batch's keywords, copied for every stage; its class,
    training step, graph and FLOPs (from the trace) are read, and its matmuls' precision judged."""
    from devkit.saved_evidence import saved_evidence

    evidence = saved_evidence("weight_norm_keywords")
    assert (evidence.target.model_class, evidence.target.mode) == ("KeywordClassifier", "train")
    assert evidence.timing.samples_ms and evidence.graph is not None and evidence.graph.nodes
    matmuls = 2 * 32 * (64 * 256 * 256 * 2 + 256 * 4)  # the two body layers over 32x64 tokens, the head over 32
    biases = 32 * 64 * 256 * 2 + 32 * 4  # addmm's added bias, in the forward
    assert evidence.flops.method == "trace" and evidence.flops.total == 3 * matmuls + biases  # forward, backward


def test_the_model_is_the_users_smallest_module_holding_the_optimizers_parameters_whatever_else_holds_its_parts():
    """A GP's likelihood is held by its model and by the marginal likelihood that holds the model too: climbing from
    the likelihood's parameter reaches both; the user's model, not the library's wrapper of the same parameters."""
    from advisor.script.describe_run import owner_of

    class Likelihood(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.noise = torch.nn.Parameter(torch.ones(1))

    class GPModel(torch.nn.Module):
        def __init__(self, likelihood):
            super().__init__()
            self.likelihood = likelihood  # registered first: its parameter is the optimizer's first
            self.mean = torch.nn.Linear(2, 1)

    likelihood = Likelihood()
    marginal = torch.nn.ModuleList([likelihood])  # the library's wrapper: holds the likelihood first, then the model
    model = GPModel(likelihood)
    marginal.append(model)
    assert list(model.parameters())[0] is likelihood.noise
    assert owner_of(list(model.parameters())) is model
    assert owner_of([model.mean.weight]) is model.mean and owner_of(list(marginal.parameters())) is model
