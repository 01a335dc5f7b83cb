from torch.utils.data import DataLoader


class InfiniteDataLoader:
    def __init__(self, dataset, **kwargs):
        self.train_loader = DataLoader(dataset, shuffle=True, **{**kwargs, "num_workers": 2, "persistent_workers": True})  # FINDING
