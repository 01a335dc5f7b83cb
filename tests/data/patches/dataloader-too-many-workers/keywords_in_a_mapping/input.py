from torch.utils.data import DataLoader


class InfiniteDataLoader:
    def __init__(self, dataset, **kwargs):
        self.train_loader = DataLoader(dataset, shuffle=True, **kwargs)  # FINDING
