import sys

import lightning.pytorch as pl
import torch

from advisor.integrations.lightning import AdvisorCallback

OUT = sys.argv[1]


class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.body(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


data = torch.utils.data.TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
trainer = pl.Trainer(max_steps=60, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False,
                     callbacks=[AdvisorCallback(out=f"{OUT}/reports", steps=10)])
trainer.fit(Net(), torch.utils.data.DataLoader(data, batch_size=32))
print("TRAINED", trainer.global_step)
