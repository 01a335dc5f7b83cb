"""A classifier trained with a class-balanced loss, written as such losses are: the classes in the batch counted
with ``torch.unique(..., return_counts=True)`` every step (host-sync: the counts' size depends on the labels, so on
a GPU the host waits for them). No name of a syncing call is needed to see it: torch tags ``_unique2`` as an
operator whose output size depends on the data.

Beside it, the same kind of operators given what fixes their size, which wait for nothing: labels one-hot encoded
with ``num_classes``, a per-class weight repeated with ``output_size``, rows picked by integer indices.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

CLASSES = 10


class Classifier(nn.Module):
    def __init__(self, width: int = 256):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, width), nn.GELU(), nn.Linear(width, CLASSES))

    def forward(self, x):
        return self.body(x)


def get_model():
    torch.manual_seed(0)
    return Classifier()


def get_dataloader():
    generator = torch.Generator().manual_seed(1)
    batches = [(torch.randn(512, 64, generator=generator), torch.randint(0, CLASSES, (512,), generator=generator))
               for _ in range(4)]
    return DataLoader(batches, batch_size=None)  # whole batches made ahead: loading costs nothing


def get_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.01)


def loss_fn(logits, batch):
    labels = batch[1]
    seen, counts = torch.unique(labels, return_counts=True)  # expect: host-sync
    weights = torch.zeros(CLASSES).index_put_((seen,), counts.float().reciprocal())
    soft = F.one_hot(labels, num_classes=CLASSES).float()  # sized by num_classes: no wait
    per_row = torch.repeat_interleave(weights[:2], torch.tensor([256, 256]), output_size=512)  # sized: no wait
    first = logits[torch.arange(0, 512, 2)]  # integer indices: no wait
    return (F.cross_entropy(logits, labels, weight=weights * CLASSES, reduction="none") * per_row).mean() \
        + 0.01 * (logits.softmax(-1) - soft).pow(2).mean() + 0.0 * first.sum()
