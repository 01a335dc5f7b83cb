"""Stable-Baselines3's quickstart: PPO with its MLP policy on CartPole (its README's first example)."""
from stable_baselines3 import PPO

model = PPO("MlpPolicy", "CartPole-v1", verbose=0, seed=0)
model.learn(total_timesteps=50_000)
