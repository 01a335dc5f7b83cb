"""A small GAN: a discriminator step and a generator step per iteration, each with its own optimizer.

advisor run's step is one whole iteration (both optimizers), not each optimizer step. Written to
be clean: advisor run should report nothing here.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    generator = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 128))
    critic = nn.Sequential(nn.Linear(128, 512), nn.ReLU(), nn.Linear(512, 1))
    g_optimizer = torch.optim.Adam(generator.parameters(), lr=2e-4, foreach=True)
    d_optimizer = torch.optim.Adam(critic.parameters(), lr=2e-4, foreach=True)
    real = torch.randn(128, 128)
    ones, zeros = torch.ones(128, 1), torch.zeros(128, 1)
    for _ in range(args.iterations):
        fake = generator(torch.randn(128, 64))
        d_loss = F.binary_cross_entropy_with_logits(critic(real), ones) + \
            F.binary_cross_entropy_with_logits(critic(fake.detach()), zeros)
        d_loss.backward()
        d_optimizer.step()  # CRITIC STEP LINE
        d_optimizer.zero_grad()
        g_loss = F.binary_cross_entropy_with_logits(critic(fake), ones)
        g_loss.backward()
        g_optimizer.step()  # GENERATOR STEP LINE
        g_optimizer.zero_grad()
        critic.zero_grad()
    print("done")


if __name__ == "__main__":
    main()
