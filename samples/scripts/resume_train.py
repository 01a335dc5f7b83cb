"""A training script that keeps its state in its working folder, as long jobs do.

It resumes from ``ckpt.pt`` when the file is there (and says from which step), writes the checkpoint
with a plain ``torch.save`` every few steps, and appends one line per step to ``metrics.csv``
through a file it keeps open for the whole run. Its results depend only on the step (each batch is
drawn from a generator seeded with the step number), so two runs from the same files leave the same
bytes. advisor must leave those files exactly as the audited run alone leaves them.
"""

import argparse
import os

import torch
import torch.nn.functional as F
from torch import nn

CHECKPOINT = "ckpt.pt"
METRICS = "metrics.csv"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    start = 0
    if os.path.exists(CHECKPOINT):
        state = torch.load(CHECKPOINT)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"resumed from step {start}", flush=True)
    else:
        print("starting fresh", flush=True)
    log = open(METRICS, "a")  # noqa: SIM115 - a logger's file, open for the whole run
    for step in range(start, start + args.steps):
        batch = torch.Generator().manual_seed(step)
        x, y = torch.randn(64, 256, generator=batch), torch.randn(64, 256, generator=batch)
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        log.write(f"{step},{loss.item():.6f}\n")  # LOG LINE
        if (step + 1) % args.save_every == 0:
            state = {"step": step + 1, "model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(state, CHECKPOINT)  # SAVE LINE
            print(f"saved step {step + 1}", flush=True)
    log.close()


if __name__ == "__main__":
    main()
