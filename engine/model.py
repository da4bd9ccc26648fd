"""Llama-family decoder (Llama, Qwen2, Mistral) over a paged KV cache.

Numerics follow transformers' implementation step for step (RMSNorm in fp32, RoPE
tables computed in fp32, residual adds in the model dtype), so greedy decoding matches
it token for token. Projections are fused (q|k|v and gate|up) to halve the kernel calls.
All sequences of a step run as one batch: the attention gathers each sequence's keys and
values from the paged cache through precomputed index tensors and makes a single
`scaled_dot_product_attention` call with a mask (see AttentionMetadata)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.config import ModelConfig


@dataclass
class AttentionGroup:
    """Sequences attended together: `gather_index` lists each one's context blocks in the
    paged cache, queries sit in a [B, max_q] padded layout (`q_dest` maps the group's flat
    token rows there; None when every sequence has one new token)."""

    num_tokens: int
    batch_size: int
    max_q: int
    gather_index: torch.Tensor  # [B, max_blocks] block ids of each sequence's context
    mask: torch.Tensor  # [B, 1, max_q, max_blocks * block_size], 0 = may attend, -inf = not
    q_dest: torch.Tensor | None  # [num_tokens]


@dataclass
class AttentionMetadata:
    """Index tensors for one step, built once and shared by all layers. The step's tokens
    are flattened to T rows: single-token sequences (decodes) first, then prefill chunks.
    The two kinds attend in separate groups so a long prefill chunk does not pad every
    decode's query to its length."""

    slot_mapping: torch.Tensor  # [T] cache slot each new token's K/V is written to
    groups: list[AttentionGroup]
    cos: torch.Tensor  # [T, 1, head_dim]
    sin: torch.Tensor  # sign-folded, see rope_tables


def rope_inv_freq(cfg: ModelConfig) -> torch.Tensor:
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = cfg.rope_scaling
    if scaling is None:
        return inv_freq
    factor = float(scaling["factor"])
    if scaling["rope_type"] == "linear":
        return inv_freq / factor
    # llama3: keep high frequencies, divide low ones by `factor`, interpolate in between.
    low_ff = float(scaling["low_freq_factor"])
    high_ff = float(scaling["high_freq_factor"])
    old_len = scaling["original_max_position_embeddings"]
    low_wavelen = old_len / low_ff
    high_wavelen = old_len / high_ff
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_tables(
    cfg: ModelConfig, max_len: int, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and a sign-folded sin: rotate_half(x) * sin == roll(x, half) * cat(-sin, sin),
    which saves the negation kernel per call (negation is exact, so numerics are unchanged)."""
    inv_freq = rope_inv_freq(cfg)
    freqs = torch.arange(max_len, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    sin = emb.sin()
    half = sin.shape[-1] // 2
    signed_sin = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)
    return emb.cos().to(device=device, dtype=dtype), signed_sin.to(device=device, dtype=dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    if dtype == torch.float32:
        # One fused kernel; in fp32 it is bitwise equal to transformers' formula below.
        return F.rms_norm(x, weight.shape, weight, eps)
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


@dataclass(slots=True, eq=False)
class LayerWeights:
    """One decoder layer's tensors (q, k and v fused; gate and up fused)."""

    input_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    o: torch.Tensor
    o_bias: torch.Tensor | None
    post_norm: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor


class LlamaModel:
    def __init__(
        self,
        cfg: ModelConfig,
        state: dict[str, torch.Tensor],
        dtype: torch.dtype,
        device: torch.device,
        block_size: int,
    ) -> None:
        if cfg.hidden_act not in ("silu", "swish"):
            raise ValueError(f"unsupported hidden_act {cfg.hidden_act!r}")
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.eps = cfg.rms_norm_eps
        self.block_size = block_size

        def take(name: str) -> torch.Tensor:
            return state[name].to(device=device, dtype=dtype)

        def maybe(name: str) -> torch.Tensor | None:
            return take(name) if name in state else None

        self.embed = take("model.embed_tokens.weight")
        self.norm = take("model.norm.weight")
        if cfg.tie_word_embeddings or "lm_head.weight" not in state:
            self.lm_head = self.embed
        else:
            self.lm_head = take("lm_head.weight")
        self.layers: list[LayerWeights] = []
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            a = p + "self_attn."
            qkv = torch.cat([take(a + "q_proj.weight"), take(a + "k_proj.weight"), take(a + "v_proj.weight")])
            biases = [maybe(a + n + ".bias") for n in ("q_proj", "k_proj", "v_proj")]
            if any(b is not None for b in biases):
                sizes = (self.q_size, self.kv_size, self.kv_size)
                qkv_bias = torch.cat(
                    [b if b is not None else torch.zeros(s, dtype=dtype, device=device) for b, s in zip(biases, sizes)]
                )
            else:
                qkv_bias = None
            m = p + "mlp."
            self.layers.append(
                LayerWeights(
                    input_norm=take(p + "input_layernorm.weight"),
                    qkv=qkv.contiguous(),
                    qkv_bias=qkv_bias,
                    o=take(a + "o_proj.weight"),
                    o_bias=maybe(a + "o_proj.bias"),
                    post_norm=take(p + "post_attention_layernorm.weight"),
                    gate_up=torch.cat([take(m + "gate_proj.weight"), take(m + "up_proj.weight")]).contiguous(),
                    down=take(m + "down_proj.weight"),
                )
            )

    def forward(
        self, input_ids: torch.Tensor, meta: AttentionMetadata, kv_caches: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """Hidden states (before the final norm) for every token of the step: [T, hidden]."""
        h = F.embedding(input_ids, self.embed)
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches):
            residual = h
            x = rms_norm(h, layer.input_norm, self.eps)
            x = self._attention(x, layer, meta, k_cache, v_cache)
            h = residual + x
            residual = h
            x = rms_norm(h, layer.post_norm, self.eps)
            gate, up = F.linear(x, layer.gate_up).chunk(2, dim=-1)
            h = residual + F.linear(F.silu(gate) * up, layer.down)
        return h

    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The final RMSNorm: `forward`'s hidden states as transformers' `last_hidden_state` has them."""
        return rms_norm(hidden, self.norm, self.eps)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.final_norm(hidden), self.lm_head)

    def _attention(
        self,
        x: torch.Tensor,
        layer: LayerWeights,
        meta: AttentionMetadata,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        T = x.shape[0]
        qkv = F.linear(x, layer.qkv, layer.qkv_bias)
        # RoPE on q and k in one go (same positions, same tables).
        qk = apply_rope(
            qkv[:, : self.q_size + self.kv_size].view(T, self.num_heads + self.num_kv_heads, self.head_dim),
            meta.cos,
            meta.sin,
        )
        q, k = qk[:, : self.num_heads], qk[:, self.num_heads :]
        v = qkv[:, self.q_size + self.kv_size :].view(T, self.num_kv_heads, self.head_dim)
        k_cache.index_copy_(0, meta.slot_mapping, k)
        v_cache.index_copy_(0, meta.slot_mapping, v)
        outs = []
        row = 0
        for group in meta.groups:
            outs.append(self._attend(q[row : row + group.num_tokens], group, k_cache, v_cache))
            row += group.num_tokens
        out = outs[0] if len(outs) == 1 else torch.cat(outs)
        return F.linear(out, layer.o, layer.o_bias)

    def _attend(self, q: torch.Tensor, g: AttentionGroup, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        B, max_q = g.batch_size, g.max_q
        # Gather whole blocks (one index per block, rows of block_size*Hkv*D values):
        # far fewer index operations than gathering slot by slot.
        block_numel = self.block_size * self.kv_size
        ctx_shape = (B, g.gather_index.shape[1] * self.block_size, self.num_kv_heads, self.head_dim)
        flat = g.gather_index.view(-1)
        keys = k_cache.view(-1, block_numel).index_select(0, flat).view(ctx_shape).transpose(1, 2)
        values = v_cache.view(-1, block_numel).index_select(0, flat).view(ctx_shape).transpose(1, 2)
        if g.q_dest is None:
            # Decodes: fold the query heads sharing a KV head into the query-length axis,
            # so each KV head meets a small matrix instead of broadcast GQA.
            group = self.num_heads // self.num_kv_heads
            queries = q.reshape(B, self.num_kv_heads, group, self.head_dim)
            out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=g.mask)
            return out.reshape(B, self.q_size)
        queries = q.new_zeros(B * max_q, self.num_heads, self.head_dim)
        queries[g.q_dest] = q
        queries = queries.view(B, max_q, self.num_heads, self.head_dim)
        out = F.scaled_dot_product_attention(
            queries.transpose(1, 2), keys, values, attn_mask=g.mask, enable_gqa=self.num_heads != self.num_kv_heads
        )
        out = out.transpose(1, 2).reshape(B * max_q, self.q_size)
        out = out[g.q_dest]
        return out
