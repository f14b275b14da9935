"""A Llama-shaped decoder in plain PyTorch (random weights, no download): embedding, RMSNorm, rotary
attention with grouped KV heads, SiLU-gated MLP, lm_head. The module names are transformers' LlamaForCausalLM
names (model.layers.N.self_attn.q_proj, ...), so checkpoints written from its state dict fuse q/k/v and
gate/up as a real Llama checkpoint does. `scale` multiplies the block and final RMSNorm weights: the inputs of every Linear
grow with it (q/k/v/gate/up/o_proj inputs about `scale`, down_proj inputs about scale^2: a sweep of
activation magnitudes)."""
import math

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary(x, pos):  # x [B, H, T, D]
    d = x.shape[-1]
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1).to(x.dtype), torch.cat([ang.sin()] * 2, -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, heads * self.hd, bias=False)
        self.k_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v_proj = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o_proj = nn.Linear(heads * self.hd, d, bias=False)
        # Per-head RMSNorm of q and k (as Qwen3 and OLMo2 have): attention scores stay bounded whatever the
        # activations' magnitude, so a sweep to 1e4 compares quantization, not a saturated softmax.
        self.q_norm = RMSNorm(self.hd)
        self.k_norm = RMSNorm(self.hd)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.heads, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv_heads, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        pos = torch.arange(t)
        q, k = rotary(q, pos), rotary(k, pos)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        return self.o_proj((att @ v).transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, d, inter):
        super().__init__()
        self.gate_proj = nn.Linear(d, inter, bias=False)
        self.up_proj = nn.Linear(d, inter, bias=False)
        self.down_proj = nn.Linear(inter, d, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, d, heads, kv_heads, inter):
        super().__init__()
        self.input_layernorm = RMSNorm(d)
        self.self_attn = Attention(d, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(d)
        self.mlp = Mlp(d, inter)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, vocab, d, heads, kv_heads, inter, blocks):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d, heads, kv_heads, inter) for _ in range(blocks))
        self.norm = RMSNorm(d)


class TinyLlama(nn.Module):
    """vocab 96, hidden 256, 4 heads of 64 with 2 KV heads (q 256, k/v 128 wide), MLP 384, 2 blocks."""

    def __init__(self, seed=0, scale=1.0, vocab=96, d=256, heads=4, kv_heads=2, inter=384, blocks=2):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.model = Decoder(vocab, d, heads, kv_heads, inter, blocks)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("layernorm.weight") or name == "model.norm.weight":
                    p.copy_(scale * (1.0 + 0.1 * torch.randn(p.shape, generator=g)))
                elif p.dim() == 2:
                    p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))

    def forward(self, tokens):
        x = self.model.embed_tokens(tokens)
        for block in self.model.layers:
            x = block(x)
        return self.lm_head(self.model.norm(x))
