"""Data-parallel training under torchrun (gloo on CPU), with three DDP mistakes and a slow rank.

    torchrun --nproc-per-node 2 samples/scripts/ddp_train.py

- DDP is built with find_unused_parameters=True although every parameter gets a gradient each step;
- gradients are accumulated over 4 micro-batches without DDP.no_sync(), so every micro-step all-reduces;
- bucket_cap_mb=1 splits the gradients into many small all-reduces;
- rank 1 prepares its batches with extra per-step work, so the other rank waits for it.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 256))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--accumulate", type=int, default=4)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    model = DistributedDataParallel(build_model(), find_unused_parameters=True,  # UNUSED PARAMETERS LINE
                                    bucket_cap_mb=1)  # BUCKET LINE
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        for _micro in range(args.accumulate):
            x, y = torch.randn(32, 256, generator=generator), torch.randn(32, 256, generator=generator)
            if rank == 1:
                time.sleep(0.012)  # SLOW RANK LINE: extra per-batch work on one rank
            loss = F.mse_loss(model(x), y) / args.accumulate
            loss.backward()  # MICRO STEP LINE: all-reduces every micro-step
        optimizer.step()
        optimizer.zero_grad()
    if rank == 0:
        print("done", os.environ.get("WORLD_SIZE"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
# expect under torchrun: find-unused-parameters, no-sync-accumulation, ddp-buckets, straggler, comm-overlap
