"""Full-batch node classification in the style of pytorch/examples' gat: one optimizer step per epoch on the
whole graph, then two evaluation forwards every epoch (``model.eval()`` under ``no_grad``, on the training and
validation masks, each with ``.item()``s), and ``model.train()`` again at the next epoch's start.

advisor run's step is the training part of an epoch: timed from the return to train mode, so the evaluation
passes between the steps are not timed as the step (before, every step held one and none was timed).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class GraphNet(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int):
        super().__init__()
        self.first = nn.Linear(features, hidden)
        self.second = nn.Linear(hidden, classes)

    def forward(self, x, adjacency):
        h = F.elu(adjacency @ self.first(F.dropout(x, 0.5, self.training)))
        return F.log_softmax(adjacency @ self.second(F.dropout(h, 0.5, self.training)), dim=1)


def train_iter(model, optimizer, x, adjacency, labels, mask):
    model.train()
    optimizer.zero_grad()
    output = model(x, adjacency)  # FORWARD LINE
    loss = F.nll_loss(output[mask], labels[mask])
    loss.backward()
    optimizer.step()


def test(model, x, adjacency, labels, mask):
    model.eval()
    with torch.no_grad():
        output = model(x, adjacency)  # EVAL LINE
        loss = F.nll_loss(output[mask], labels[mask])
        accuracy = (output[mask].argmax(1) == labels[mask]).float().mean()
    return loss.item(), accuracy.item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=60)
    args = parser.parse_args()
    torch.manual_seed(0)
    nodes = 600
    x = torch.rand(nodes, 256)
    adjacency = (torch.rand(nodes, nodes) < 0.01).float() + torch.eye(nodes)
    adjacency = adjacency / adjacency.sum(1, keepdim=True)
    labels = torch.randint(7, (nodes,))
    train_mask, val_mask = torch.arange(nodes) < 400, torch.arange(nodes) >= 400
    model = GraphNet(256, 64, 7)
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=5e-4)
    for epoch in range(args.epochs):
        train_iter(model, optimizer, x, adjacency, labels, train_mask)
        train_loss, train_acc = test(model, x, adjacency, labels, train_mask)
        val_loss, val_acc = test(model, x, adjacency, labels, val_mask)
        if epoch % 20 == 0:
            print(f"epoch {epoch}: train {train_loss:.3f} {train_acc:.2f}, val {val_loss:.3f} {val_acc:.2f}")


if __name__ == "__main__":
    main()
