import torch


class Trainer:
    def __init__(self, model):
        self.model = model

    def step(self, x):
        return self.model(x)  # FINDING


Trainer(torch.nn.Linear(8, 8)).step(torch.randn(4, 8))
