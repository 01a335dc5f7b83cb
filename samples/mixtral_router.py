"""A sparse mixture-of-experts block written the way Hugging Face's Mixtral writes it: the router's top-2 with
renormalised weights, a one-hot expert mask permuted to (experts, top_k, tokens), the experts that got any token
found with ``torch.greater(...).nonzero()`` and iterated as a tensor, each expert's tokens found with
``torch.where`` on its mask row, and the results scattered back with ``index_add_`` (host-sync: every
``nonzero``/``where`` has a data-dependent size, and iterating a tensor reads it on the host; graph-breaks:
Dynamo stops at the first). The zeros it accumulates into is changed in place: no constant to keep.
"""

import torch
import torch.nn.functional as F
from torch import nn


class BlockSparseTop2MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.w1 = nn.Linear(hidden, ffn, bias=False)
        self.w2 = nn.Linear(ffn, hidden, bias=False)
        self.w3 = nn.Linear(hidden, ffn, bias=False)

    def forward(self, hidden_states):
        return self.w2(F.silu(self.w1(hidden_states)) * self.w3(hidden_states))


class SparseMoeBlock(nn.Module):
    def __init__(self, hidden: int = 128, ffn: int = 256, num_experts: int = 8, top_k: int = 2):
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.gate = nn.Linear(hidden, num_experts, bias=False)
        self.experts = nn.ModuleList(BlockSparseTop2MLP(hidden, ffn) for _ in range(num_experts))

    def forward(self, hidden_states):
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = torch.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype)
        expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()  # expect: host-sync, graph-breaks
        for expert_idx in expert_hit:
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        return final_hidden_states.reshape(batch_size, sequence_length, hidden_dim), router_logits


def get_model():
    torch.manual_seed(0)
    return SparseMoeBlock().eval()


def get_inputs():
    return torch.randn(4, 64, 128, generator=torch.Generator().manual_seed(1))
