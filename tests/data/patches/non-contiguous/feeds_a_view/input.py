def forward(self, x):
    return x.transpose(1, 2).contiguous().view(x.shape[0], -1)  # FINDING
