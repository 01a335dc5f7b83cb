from torch.utils.data import DataLoader


def get_dataloader(dataset, defaults, overrides):
    return DataLoader(dataset, **defaults, **overrides)  # FINDING
