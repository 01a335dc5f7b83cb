"""A recommendation model in the DLRM style whose embedding tables are stored in bfloat16 (to halve their memory)
while its dense layers stay float32: most parameters are bf16, yet the matmuls that take the step's time run
in fp32 (missing-amp judges the operators' dtypes, not the parameters').
"""

import torch
from torch import nn


class Recommender(nn.Module):
    def __init__(self, tables: int = 4, rows: int = 200_000, dim: int = 64, dense: int = 13):
        super().__init__()
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, dim), nn.ReLU())
        self.top = nn.Sequential(nn.Linear(dim * (tables + 1), 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                 nn.Linear(1024, 1))

    def forward(self, dense, indices, offsets):
        features = [self.bottom(dense)]
        for table, (index, offset) in zip(self.embeddings, zip(indices, offsets)):
            features.append(table(index, offset).float())  # bf16 lookups, widened for the dense part
        return self.top(torch.cat(features, dim=1))  # expect: missing-amp


def get_model():
    torch.manual_seed(0)
    model = Recommender()
    for table in model.embeddings:
        table.to(torch.bfloat16)
    return model.eval()


def get_inputs():
    generator = torch.Generator().manual_seed(1)
    batch, per_bag = 512, 8
    dense = torch.randn(batch, 13, generator=generator)
    indices = [torch.randint(200_000, (batch * per_bag,), generator=generator) for _ in range(4)]
    offsets = [torch.arange(0, batch * per_bag, per_bag) for _ in range(4)]
    return dense, indices, offsets
