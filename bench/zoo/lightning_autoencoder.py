"""Lightning's quickstart LitAutoEncoder (its README), on random 28x28 images instead of MNIST (no download)."""
import tempfile

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class LitAutoEncoder(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(28 * 28, 128), nn.ReLU(), nn.Linear(128, 3))
        self.decoder = nn.Sequential(nn.Linear(3, 128), nn.ReLU(), nn.Linear(128, 28 * 28))

    def training_step(self, batch, batch_idx):
        x, _ = batch
        x = x.view(x.size(0), -1)
        loss = F.mse_loss(self.decoder(self.encoder(x)), x)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


images = TensorDataset(torch.rand(6400, 1, 28, 28), torch.zeros(6400))
trainer = L.Trainer(max_epochs=3, accelerator="cpu", default_root_dir=tempfile.mkdtemp(), enable_progress_bar=False)
trainer.fit(LitAutoEncoder(), DataLoader(images, batch_size=64))
