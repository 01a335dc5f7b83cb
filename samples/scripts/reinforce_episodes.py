"""Policy-gradient training on episodes of varying length, in the style of pytorch/examples' reinforce.py: per
environment step a one-sample forward of the policy, a sampled action and ``action.item()``; at the episode's
end the discounted returns, one backward through the whole episode and one Adam step. The environment is a
small pole-balancing simulation written here (no gym), so episodes end when the pole falls.

advisor run's step is one episode (one optimizer step), however many environment steps it took.
"""

import argparse
import math
import random

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical


class Pole:
    """A cart-pole-like system: the state drifts with the action and noise; the episode ends past 12 degrees."""

    def reset(self):
        self.state = [random.uniform(-0.05, 0.05) for _ in range(4)]
        return self.state

    def step(self, action: int):
        x, velocity, angle, spin = self.state
        force = 1.0 if action == 1 else -1.0
        spin += 0.02 * (9.8 * math.sin(angle) - force * math.cos(angle)) + random.gauss(0, 0.01)
        angle += 0.02 * spin
        velocity += 0.02 * force
        x += 0.02 * velocity
        self.state = [x, velocity, angle, spin]
        done = abs(angle) > 12 * math.pi / 180 or abs(x) > 2.4
        return self.state, 1.0, done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

    def forward(self, x):
        return F.softmax(self.affine2(F.relu(self.dropout(self.affine1(x)))), dim=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=400)
    args = parser.parse_args()
    random.seed(0)
    torch.manual_seed(0)
    env, policy = Pole(), Policy()
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    for episode in range(args.episodes):
        state, log_probs, rewards = env.reset(), [], []
        for _ in range(500):
            probs = policy(torch.tensor(state).float().unsqueeze(0))  # FORWARD LINE
            m = Categorical(probs)
            action = m.sample()
            log_probs.append(m.log_prob(action))
            state, reward, done = env.step(action.item())  # ITEM LINE
            rewards.append(reward)
            if done:
                break
        returns, running = [], 0.0
        for r in reversed(rewards):
            running = r + 0.99 * running
            returns.insert(0, running)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + 1e-6) if len(returns) > 1 else returns
        loss = torch.cat([-lp * R for lp, R in zip(log_probs, returns)]).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()  # STEP LINE
        if episode % 100 == 0:
            print(f"episode {episode}: length {len(rewards)}")


if __name__ == "__main__":
    main()
