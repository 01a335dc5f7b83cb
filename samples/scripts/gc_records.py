"""A classifier trainer that keeps a record of every sample it sees, for a report at the end: 2,048 small dicts a
step, each holding a list, all kept. Dicts that hold a list are tracked by Python's garbage collector, so its passes
come more and more often over a larger and larger heap.

advisor run should report gc-pauses (the collector's share of the step); clean_train.py keeps nothing and gets none.
"""

import torch
import torch.nn.functional as F
from torch import nn

RECORDS_PER_SAMPLE = 8


def main() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, 10, (256,), generator=torch.Generator().manual_seed(2))
    records = []  # expect: gc-pauses
    for step in range(400):
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        predicted = logits.argmax(1).tolist()
        for index, guess in enumerate(predicted * RECORDS_PER_SAMPLE):
            records.append({"step": step, "index": index, "guess": guess, "tags": [step, index]})
    print(f"{len(records)} records, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
