def step(model, x):
    model.zero_grad()  # FINDING
    model(x).sum().backward()
