"""A word-level language model trained the way pytorch/examples' word_language_model trains it: no optimizer
object. Each batch: ``model.zero_grad()``, a forward, the loss through an ``nn.NLLLoss`` module (an outermost
module call beside the model's), a backward, gradient clipping, then ``p.data.add_(p.grad, alpha=-lr)`` for
every parameter, and ``total_loss += loss.item()`` (one host sync a step).

advisor run's step is one whole iteration, ended by each backward: not each call of the model and of the loss
module (two steps of very different lengths).
"""

import argparse
import math

import torch
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float = 0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz: int):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int, bptt: int):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i: i + seq_len], source[i + 1: i + 1 + seq_len].reshape(-1)


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=20.0)
    parser.add_argument("--bptt", type=int, default=20)
    parser.add_argument("--clip", type=float, default=0.25)
    args = parser.parse_args()
    torch.manual_seed(0)
    ntokens = 2000
    corpus = torch.randint(ntokens, (40_000,))
    train_data = batchify(corpus, 20)
    model = RNNModel(ntokens, 128, 128, 2)
    criterion = nn.NLLLoss()
    for epoch in range(args.epochs):
        model.train()
        total_loss = 0.0
        hidden = model.init_hidden(20)
        starts = range(0, train_data.size(0) - 1, args.bptt)
        for i in starts:
            data, targets = get_batch(train_data, i, args.bptt)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)  # FORWARD LINE
            loss = criterion(output, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-args.lr)  # UPDATE LINE
            total_loss += loss.item()  # ITEM LINE
        print(f"epoch {epoch}: loss {total_loss / len(starts):.3f}, ppl {math.exp(total_loss / len(starts)):.1f}")


if __name__ == "__main__":
    main()
