"""A text classifier written the way libraries write theirs: called with keyword arguments only (a Trainer's
``model(**batch)``: ``get_inputs()`` returns the batch as a dict), and its layers under
``torch.nn.utils.weight_norm``, which keeps each layer's ``weight`` as a result of autograd (computed from two
parameters before every forward): a tensor ``copy.deepcopy`` refuses.

advisor copies the model for every stage and fix with those tensors detached (the hook computes them again), and
calls it with the batch's keywords: the step is timed, traced, its FLOPs counted from the trace and its graph
captured, as for any model.
"""

import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import weight_norm


def normed(features_in: int, features_out: int) -> nn.Linear:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated for parametrizations, still widespread
        return weight_norm(nn.Linear(features_in, features_out))


class KeywordClassifier(nn.Module):
    def __init__(self, vocab: int = 512, width: int = 256, classes: int = 4):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.body = nn.Sequential(normed(width, width), nn.GELU(), normed(width, width), nn.GELU())
        self.head = normed(width, classes)

    def forward(self, *, input_ids, attention_mask):
        hidden = self.body(self.embed(input_ids)) * attention_mask[..., None]  # expect: missing-amp
        pooled = hidden.sum(1) / attention_mask.sum(1, keepdim=True)
        return self.head(pooled)


def get_model():
    torch.manual_seed(0)
    return KeywordClassifier()


def get_inputs():
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(0, 512, (32, 64), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones(32, 64)}


def get_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)


def loss_fn(logits, batch):
    return F.cross_entropy(logits, batch["input_ids"][:, 0] % 4)
