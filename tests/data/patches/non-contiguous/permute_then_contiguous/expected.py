def forward(self, x):
    x = x.permute(0, 2, 3, 1)  # FINDING: NCHW -> NHWC copy
    return self.head(x)
