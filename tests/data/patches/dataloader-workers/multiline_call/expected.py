from torch.utils.data import DataLoader


def get_dataloader():
    return DataLoader(  # FINDING
        make_dataset(),
        batch_size=32,  # per step
        num_workers=1,
        persistent_workers=True,
    )
