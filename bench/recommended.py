"""The code a finding recommends, written by hand on the same weights: what advisor's verified
speedup must agree with (bench/verify_accuracy.py). A fix that is itself the recommended code
(autocast, channels_last, torch.compile, loader options) needs no entry here.
"""

from __future__ import annotations

import copy
import types
from typing import Callable

import torch.nn.functional as F

from advisor.rulekit.fixing import replace_target


def _gpt_sdpa_forward(self, x):
    """samples/manual_attention.py's CausalSelfAttention with the recommended SDPA call."""
    B, T, C = x.shape
    q, k, v = self.qkv(x).split(C, dim=2)
    q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout.p if self.training else 0.0)
    return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


def _hf_sdpa_forward(self, hidden_states):
    """samples/hf_eager_attention.py's GPT2Attention with the recommended SDPA call."""
    shape = (*hidden_states.shape[:-1], self.heads, self.head_dim)
    query, key, value = self.c_attn(hidden_states).split(self.heads * self.head_dim, dim=2)
    query, key, value = (t.view(shape).transpose(1, 2) for t in (query, key, value))
    out = F.scaled_dot_product_attention(query, key, value, is_causal=True,
                                         dropout_p=self.attn_dropout.p if self.training else 0.0)
    return self.c_proj(out.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1).contiguous())


def _einsum_sdpa_forward(self, x, additive_mask):
    """samples/einsum_attention.py's SelfAttention with the recommended SDPA call."""
    B, T, C = x.shape
    q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in self.qkv(x).split(C, dim=2))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=additive_mask,
                                       dropout_p=self.dropout if self.training else 0.0)
    return self.out(y.transpose(1, 2).reshape(B, T, C))


def _with_forward(class_name: str, forward: Callable) -> Callable:
    def build(target):
        model = copy.deepcopy(target.model)
        for module in model.modules():
            if type(module).__name__ == class_name:
                module.forward = types.MethodType(forward, module)
        return replace_target(target, model=model)
    return build


RECOMMENDED: dict[tuple[str, str], Callable] = {
    ("manual_attention", "manual-attention"): _with_forward("CausalSelfAttention", _gpt_sdpa_forward),
    ("manual_attention_train", "manual-attention"): _with_forward("CausalSelfAttention", _gpt_sdpa_forward),
    ("hf_eager_attention", "manual-attention"): _with_forward("GPT2Attention", _hf_sdpa_forward),
    ("einsum_attention", "manual-attention"): _with_forward("SelfAttention", _einsum_sdpa_forward),
}
