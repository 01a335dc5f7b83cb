"""skorch's quickstart: a PyTorch module trained through scikit-learn's fit, on a synthetic tabular classification
set (its README's make_classification)."""
import numpy as np
import torch
from sklearn.datasets import make_classification
from skorch import NeuralNetClassifier
from torch import nn

X, y = make_classification(20000, 20, n_informative=10, random_state=0)
X, y = X.astype(np.float32), y.astype(np.int64)


class ClassifierModule(nn.Module):
    def __init__(self, num_units=10, nonlin=nn.ReLU()):
        super().__init__()
        self.dense0 = nn.Linear(20, num_units)
        self.nonlin = nonlin
        self.dropout = nn.Dropout(0.5)
        self.dense1 = nn.Linear(num_units, num_units)
        self.output = nn.Linear(num_units, 2)

    def forward(self, X, **kwargs):
        X = self.dropout(self.nonlin(self.dense0(X)))
        X = self.nonlin(self.dense1(X))
        return self.output(X)


net = NeuralNetClassifier(ClassifierModule, max_epochs=10, lr=0.1, iterator_train__shuffle=True,
                          criterion=nn.CrossEntropyLoss, verbose=0)
net.fit(X, y)
torch.manual_seed(0)
