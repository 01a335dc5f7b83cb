import torch


class Chain(torch.nn.Module):
    def forward(self, x, steps):
        for _ in range(steps):
            x = x * 0.5 + 1  # FINDING
        return x


def train(steps):
    chain = torch.compile(Chain(
    ))  # built over two lines, kept as written
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    for epoch in range(10):
        optimizer.zero_grad()
        out = chain(torch.randn(4), steps)
        out.sum().backward()
        optimizer.step()


if __name__ == "__main__":
    train(50)
