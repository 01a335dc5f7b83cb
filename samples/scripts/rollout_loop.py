"""An on-policy reinforcement-learning loop written the way small RL libraries write it: each iteration a rollout of
256 environment steps, each a batch-1 forward of the actor-critic under no_grad on one environment's observation,
then 2 epochs of 2 minibatch updates (4 Adam steps). The environment is a cart and a pole simulated in NumPy.

advisor run's step is each Adam step; every fourth holds the rollout, which takes most of the loop's time
(rollout-bound, at the policy's call): stepping several environments together would give each forward a batch.
Reading the action back to the host every environment step is a sync on a GPU (host-sync, LOW on a CPU).
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROLLOUT, EPOCHS, MINIBATCHES, ITERATIONS = 256, 2, 2, 40


class CartPole:
    """Classic cart-pole dynamics (Barto, Sutton and Anderson, 1983), reset when the pole falls."""

    def __init__(self, seed: int):
        self.random = np.random.default_rng(seed)
        self.state = self.random.uniform(-0.05, 0.05, 4)

    def step(self, action: int):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = np.array([x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot,
                               theta_dot + 0.02 * theta_acc])
        done = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 0.21
        if done:
            self.state = self.random.uniform(-0.05, 0.05, 4)
        return self.state.astype(np.float32), 1.0, done


class ActorCritic(nn.Module):
    def __init__(self, width: int = 64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh())
        self.actor, self.critic = nn.Linear(width, 2), nn.Linear(width, 1)

    def forward(self, observations):
        hidden = self.body(observations)
        return self.actor(hidden), self.critic(hidden).squeeze(-1)


def main() -> None:
    torch.manual_seed(0)
    env, model = CartPole(seed=1), ActorCritic()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, foreach=True)
    random = np.random.default_rng(2)
    observation = env.state.astype(np.float32)
    for _ in range(ITERATIONS):
        observations, actions, rewards = [], [], []
        for _ in range(ROLLOUT):
            with torch.no_grad():
                logits, _ = model(torch.from_numpy(observation)[None])  # POLICY LINE
            probabilities = torch.softmax(logits, -1)[0].numpy()  # expect: host-sync
            action = int(random.random() < probabilities[1])
            observations.append(observation)
            actions.append(action)
            observation, reward, done = env.step(action)
            rewards.append(0.0 if done else reward)
        batch_observations = torch.from_numpy(np.stack(observations))
        batch_actions = torch.tensor(actions)
        returns = torch.from_numpy(np.cumsum(np.array(rewards, dtype=np.float32)[::-1])[::-1].copy())
        for _ in range(EPOCHS):
            for chunk in torch.randperm(ROLLOUT).chunk(MINIBATCHES):
                logits, values = model(batch_observations[chunk])
                advantage = returns[chunk] - values.detach()
                log_probability = F.log_softmax(logits, -1).gather(1, batch_actions[chunk, None]).squeeze(1)
                loss = -(log_probability * advantage).mean() + F.mse_loss(values, returns[chunk])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()


if __name__ == "__main__":
    main()
