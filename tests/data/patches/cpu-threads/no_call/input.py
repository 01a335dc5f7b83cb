import os

import torch

os.environ["OMP_NUM_THREADS"] = "64"
