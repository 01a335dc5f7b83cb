def forward(self, x):
    x = x.permute(0, 2, 3, 1).contiguous()  # FINDING: NCHW -> NHWC copy
    return self.head(x)
