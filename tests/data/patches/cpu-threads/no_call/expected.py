import os

import torch
torch.set_num_threads(1)

os.environ["OMP_NUM_THREADS"] = "64"
