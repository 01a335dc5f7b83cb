from torch.utils.data import DataLoader


def get_dataloader():
    return DataLoader(make_dataset(), batch_size=4, num_workers=2, persistent_workers=True)  # FINDING
