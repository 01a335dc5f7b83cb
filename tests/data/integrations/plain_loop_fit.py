"""A plain PyTorch loop audited in its own process (what the framework callbacks install): an optimizer stepping 48
tensors one by one, measured with foreach/fused switched on and off in the loop's own later steps. It trains until
the verification is done (a real training runs on anyway)."""
import sys

import torch

from advisor.integrations.in_process import InProcessAudit

OUT = sys.argv[1]
torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LayerNorm(32))
                                          for _ in range(24)])


net = Net()
model = net.body  # the loop calls the part, as a LightningModule's training_step may: the fixes find it there
optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=False)
audit = InProcessAudit(out=f"{OUT}/reports", steps=10, pairs=6)  # a fixed count of pairs: no time decides
audit.start()
steps = 0
while steps < 20000 and (audit.verifying is None or audit.verifying.is_alive()):
    loss = model(torch.randn(16, 32)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    steps += 1
    audit.at_step_end()
audit.training_ended()
# what the training has after it: the user's own optimizer options and model, the fixes withdrawn
print("TRAINED", steps, "FOREACH", optimizer.param_groups[0]["foreach"], "FUSED", optimizer.param_groups[0]["fused"],
      "OWN FORWARD", "forward" in model.__dict__)
