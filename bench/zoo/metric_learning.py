"""pytorch-metric-learning's quickstart: a miner and a loss from the library over an embedding network's output
(TripletMarginLoss with a MultiSimilarityMiner), on synthetic labelled features."""
import torch
from pytorch_metric_learning import losses, miners
from torch import nn

generator = torch.Generator().manual_seed(0)
features, labels = torch.randn(8192, 64, generator=generator), torch.randint(0, 32, (8192,), generator=generator)
model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 128))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
miner, loss_func = miners.MultiSimilarityMiner(), losses.TripletMarginLoss()
for _step in range(300):
    index = torch.randint(0, 8192, (128,), generator=generator)
    embeddings = model(features[index])
    loss = loss_func(embeddings, labels[index], miner(embeddings, labels[index]))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
