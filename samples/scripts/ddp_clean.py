"""Data-parallel training under torchrun (gloo on CPU), written well: default buckets, no search for
unused parameters, no_sync on every micro-step but the last, and balanced ranks. advisor run should
report no DDP finding here.

    torchrun --nproc-per-node 2 samples/scripts/ddp_clean.py
"""

import argparse
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--accumulate", type=int, default=4)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                                  nn.Linear(1024, 256)), gradient_as_bucket_view=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(args.steps):
        for micro in range(args.accumulate):
            x, y = torch.randn(32, 256, generator=generator), torch.randn(32, 256, generator=generator)
            with model.no_sync() if micro < args.accumulate - 1 else contextlib.nullcontext():
                (F.mse_loss(model(x), y) / args.accumulate).backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
