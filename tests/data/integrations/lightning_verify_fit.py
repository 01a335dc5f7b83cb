"""A Lightning fit whose optimizer steps 48 tensors one by one: the callback's fix said in Lightning's words and
measured in the fit's own later steps."""
import sys

import lightning.pytorch as pl
import torch

from advisor.integrations.lightning import AdvisorCallback

OUT = sys.argv[1]


class Deep(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.LayerNorm(32))
                                          for _ in range(24)])

    def forward(self, x):
        return self.body(x)

    def training_step(self, batch, batch_idx):
        return self(batch[0]).square().mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3, foreach=False)


callback = AdvisorCallback(out=f"{OUT}/reports", steps=10, pairs=6)  # a fixed count of pairs: no time decides
trainer = pl.Trainer(max_steps=3000, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])
module = Deep()
trainer.fit(module, torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(16384, 32)), batch_size=16))
optimizer = trainer.optimizers[0]
print("TRAINED", trainer.global_step, "FOREACH", optimizer.param_groups[0]["foreach"], "OWN FORWARD",
      "forward" in module.__dict__)
