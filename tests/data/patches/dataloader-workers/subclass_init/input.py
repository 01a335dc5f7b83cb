from torch.utils.data import DataLoader


class Loader(DataLoader):
    def __init__(self, dataset):
        super().__init__(dataset, batch_size=8)  # FINDING
