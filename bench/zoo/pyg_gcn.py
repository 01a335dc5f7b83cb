"""PyTorch Geometric's introductory GCN (its documentation's "Learning Methods on Graphs"), on a random graph with
Cora's sizes instead of the downloaded Cora."""
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

generator = torch.Generator().manual_seed(0)
nodes, features, classes = 2708, 1433, 7
data = Data(x=torch.rand(nodes, features, generator=generator),
            edge_index=torch.randint(0, nodes, (2, 10556), generator=generator),
            y=torch.randint(0, classes, (nodes,), generator=generator))
data.train_mask = torch.rand(nodes, generator=generator) < 0.1


class GCN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GCNConv(features, 16)
        self.conv2 = GCNConv(16, classes)

    def forward(self, data):
        x, edge_index = data.x, data.edge_index
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.conv2(x, edge_index), dim=1)


model = GCN()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
model.train()
for _epoch in range(200):
    optimizer.zero_grad()
    out = model(data)
    loss = F.nll_loss(out[data.train_mask], data.y[data.train_mask])
    loss.backward()
    optimizer.step()
