import torch

torch.set_num_threads(64)  # "more is faster"
