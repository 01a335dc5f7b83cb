"""Pyro's Bayesian regression tutorial: a PyroModule linear model, an AutoNormal guide, SVI with Adam."""
import pyro
import pyro.distributions as dist
import torch
from pyro.infer import SVI, Trace_ELBO
from pyro.infer.autoguide import AutoNormal
from pyro.nn import PyroModule, PyroSample


class BayesianRegression(PyroModule):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = PyroModule[torch.nn.Linear](in_features, out_features)
        self.linear.weight = PyroSample(dist.Normal(0.0, 1.0).expand([out_features, in_features]).to_event(2))
        self.linear.bias = PyroSample(dist.Normal(0.0, 10.0).expand([out_features]).to_event(1))

    def forward(self, x, y=None):
        sigma = pyro.sample("sigma", dist.Uniform(0.0, 10.0))
        mean = self.linear(x).squeeze(-1)
        with pyro.plate("data", x.shape[0]):
            return pyro.sample("obs", dist.Normal(mean, sigma), obs=y)


x = torch.randn(1000, 3)
y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.3 * torch.randn(1000)
model = BayesianRegression(3, 1)
guide = AutoNormal(model)
svi = SVI(model, guide, pyro.optim.Adam({"lr": 0.03}), loss=Trace_ELBO())
pyro.clear_param_store()
for _step in range(1500):
    svi.step(x, y)
