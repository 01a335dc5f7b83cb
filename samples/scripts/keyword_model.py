"""A model written the way real libraries write them: called with keyword arguments only (a Trainer's
``model(**batch)``), refusing a positional call, and keeping results of autograd on itself between steps (the
last batch's action distribution, as a policy keeps it, inside an object of its own, and the last logits).

advisor run must read it as it ran: the step's FLOPs from the trace, the graph captured with the same keyword
arguments, the model described though deepcopy refuses its non-leaf tensors. Nothing here is slow.
"""

import torch
import torch.nn.functional as F
from torch import nn


class LastActions:
    """What a policy keeps of its last forward: a distribution whose tensors carry autograd's history."""

    def __init__(self, logits: torch.Tensor):
        # validate_args=False: checking the logits would read them on the host (a sync on a GPU) every step
        self.distribution = torch.distributions.Categorical(logits=logits, validate_args=False)


class KeywordPolicy(nn.Module):
    def __init__(self, vocab: int = 64, width: int = 128, actions: int = 8):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.body = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
        self.head = nn.Linear(width, actions)
        self.last = None
        self.last_logits = None

    def forward(self, *, input_ids=None, inputs_embeds=None, labels=None):
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        hidden = self.embed(input_ids).mean(1) if inputs_embeds is None else inputs_embeds
        logits = self.head(self.body(hidden))
        self.last = LastActions(logits)  # autograd's results, kept on the module between steps
        self.last_logits = logits
        return {"loss": F.cross_entropy(logits, labels), "logits": logits}


def main() -> None:
    torch.manual_seed(0)
    model = KeywordPolicy()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    generator = torch.Generator().manual_seed(1)
    batches = [{"input_ids": torch.randint(0, 64, (32, 16), generator=generator),
                "labels": torch.randint(0, 8, (32,), generator=generator)} for _ in range(4)]
    for step in range(60):
        out = model(**batches[step % 4])
        out["loss"].backward()
        optimizer.step()
        optimizer.zero_grad()


if __name__ == "__main__":
    main()
# expect nothing
