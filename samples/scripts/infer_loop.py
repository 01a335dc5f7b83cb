"""An inference script that forgot ``model.eval()`` and copies every result to NumPy.

Batches come from a loader over in-memory features; each prediction is moved to NumPy inside the
loop (a host sync on a GPU), and Dropout stays active because the model was never put in eval
mode (train-mode-inference).
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Dropout(0.1), nn.Linear(512, 16))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    model = build_model()  # FORGOT EVAL LINE: no model.eval()
    features = torch.randn(args.batches * 64, 128, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(features), batch_size=64)
    predictions = []
    with torch.no_grad():
        for (x,) in loader:
            scores = model(x)
            predictions.append(scores.argmax(dim=-1).numpy())  # NUMPY LINE
    print(f"{sum(len(p) for p in predictions)} predictions")


if __name__ == "__main__":
    main()
