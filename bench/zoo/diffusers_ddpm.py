"""Diffusers' training example for unconditional image generation (train_unconditional), reduced: a small UNet2DModel,
DDPMScheduler noise, MSE on the predicted noise, AdamW; random 32x32 images instead of a downloaded dataset."""
import torch
import torch.nn.functional as F
from diffusers import DDPMScheduler, UNet2DModel

model = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                    block_out_channels=(32, 64), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                    up_block_types=("AttnUpBlock2D", "UpBlock2D"))
scheduler = DDPMScheduler(num_train_timesteps=1000)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
images = torch.randn(64, 3, 32, 32)
for _step in range(200):
    clean = images[torch.randint(0, 64, (8,))]
    noise = torch.randn_like(clean)
    timesteps = torch.randint(0, scheduler.config.num_train_timesteps, (clean.shape[0],))
    noisy = scheduler.add_noise(clean, noise, timesteps)
    loss = F.mse_loss(model(noisy, timesteps, return_dict=False)[0], noise)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
