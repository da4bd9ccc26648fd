"""Owns the model weights and the paged KV tensors; turns a scheduled batch into logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import EngineConfig, ModelConfig
from engine.model import AttentionGroup, AttentionMetadata, LlamaModel, rope_tables
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledChunk
from engine.sequence import Sequence
from engine.weights import load_state_dict

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}
DEFAULT_KV_CACHE_BYTES = 128 * 1024 * 1024
# A pooling pass samples nothing; its sequences only carry token ids and block tables.
_POOLING_PARAMS = SamplingParams(max_tokens=1)


@dataclass(frozen=True, slots=True)
class ForwardOutput:
    """One forward pass: fp32 logits for the sequences whose last known token was computed
    this step (those get a new token), one row per sequence, and those sequences."""

    logits: torch.Tensor
    sampled: list[Sequence]


@dataclass(frozen=True, slots=True)
class _GroupIndex:
    """One attention group's metadata, with its tokens' positions and KV slots."""

    group: AttentionGroup
    positions: torch.Tensor
    slot_mapping: torch.Tensor


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; use one of {sorted(DTYPES)}") from None


class ModelRunner:
    def __init__(self, model_cfg: ModelConfig, cfg: EngineConfig, max_model_len: int) -> None:
        self.model_cfg = model_cfg
        self.dtype = parse_dtype(cfg.dtype)
        self.device = torch.device(cfg.device)
        self.block_size = cfg.block_size
        self.model = LlamaModel(model_cfg, load_state_dict(cfg.model_dir), self.dtype, self.device, cfg.block_size)
        self.cos, self.sin = rope_tables(model_cfg, max_model_len, self.dtype, self.device)
        self.num_blocks = self._num_blocks(cfg, max_model_len)
        slots = self.num_blocks * self.block_size
        shape = (slots, model_cfg.num_key_value_heads, model_cfg.head_dim)
        # Zeroed, not empty: padded gathers read slots that were never written, and a NaN
        # there would survive the attention mask (0 * NaN).
        self.kv_caches = [
            (
                torch.zeros(shape, dtype=self.dtype, device=self.device),
                torch.zeros(shape, dtype=self.dtype, device=self.device),
            )
            for _ in range(model_cfg.num_hidden_layers)
        ]

    def _num_blocks(self, cfg: EngineConfig, max_model_len: int) -> int:
        if cfg.num_blocks is not None:
            return cfg.num_blocks
        m = self.model_cfg
        bytes_per_block = (
            2
            * m.num_hidden_layers
            * self.block_size
            * m.num_key_value_heads
            * m.head_dim
            * torch.empty((), dtype=self.dtype).element_size()
        )
        budget = cfg.kv_cache_bytes
        if budget is None:
            # Enough for every running sequence at full length, capped so the default does
            # not grab a lot of memory for a large model.
            wanted = cfg.max_num_seqs * -(-max_model_len // self.block_size) * bytes_per_block
            budget = min(wanted, DEFAULT_KV_CACHE_BYTES)
        num = budget // bytes_per_block
        if num < 1:
            raise ValueError(f"kv_cache_bytes={budget} is smaller than one block ({bytes_per_block} bytes)")
        return int(num)

    def copy_block(self, src: int, dst: int) -> None:
        bs = self.block_size
        for k_cache, v_cache in self.kv_caches:
            k_cache[dst * bs : (dst + 1) * bs] = k_cache[src * bs : (src + 1) * bs]
            v_cache[dst * bs : (dst + 1) * bs] = v_cache[src * bs : (src + 1) * bs]

    @torch.inference_mode()
    def execute(self, scheduled: list[ScheduledChunk]) -> ForwardOutput:
        """Run one forward pass over the scheduled chunks."""
        decodes = [chunk for chunk in scheduled if chunk.num_tokens == 1]
        prefills = [chunk for chunk in scheduled if chunk.num_tokens != 1] if len(decodes) != len(scheduled) else []
        groups = split_by_context(decodes) + split_prefills(prefills)
        ordered = [chunk for group in groups for chunk in group]
        input_ids: list[int] = []
        sample_rows: list[int] = []
        sampled: list[Sequence] = []
        end = 0
        for chunk in ordered:
            seq, n = chunk.seq, chunk.num_tokens
            s = seq.num_computed_tokens
            if n == 1:
                input_ids.append(seq.token_ids[s])
            else:
                input_ids.extend(seq.token_ids[s : s + n])
            end += n
            if s + n == seq.num_tokens:
                sample_rows.append(end - 1)
                sampled.append(seq)
        meta = self._metadata(groups)
        ids = torch.tensor(input_ids, dtype=torch.long).to(self.device, non_blocking=True)
        hidden = self.model.forward(ids, meta, self.kv_caches)
        if not sampled:
            return ForwardOutput(torch.empty(0, self.model_cfg.vocab_size), sampled)
        rows = torch.tensor(sample_rows, dtype=torch.long).to(self.device, non_blocking=True)
        logits = self.model.logits(hidden.index_select(0, rows))
        return ForwardOutput(logits.float(), sampled)

    @torch.inference_mode()
    def last_token_states(self, prompts: list[list[int]]) -> torch.Tensor:
        """Each prompt's last-token hidden state after the final norm, fp32 [len(prompts), hidden],
        from one prefill pass. The pass writes KV tensors of its own, sized to these prompts
        and dropped afterwards: the paged cache and the sequences in it are not touched."""
        bs = self.block_size
        chunks: list[ScheduledChunk] = []
        num_blocks = 0
        for ids in prompts:
            seq = Sequence("pooling", 0, ids, _POOLING_PARAMS)
            blocks = -(-len(ids) // bs)
            seq.block_ids = list(range(num_blocks, num_blocks + blocks))
            num_blocks += blocks
            chunks.append(ScheduledChunk(seq, len(ids)))
        singles = [chunk for chunk in chunks if chunk.num_tokens == 1]
        groups = split_by_context(singles) + split_prefills([chunk for chunk in chunks if chunk.num_tokens != 1])
        ordered = [chunk for group in groups for chunk in group]
        m = self.model_cfg
        shape = (num_blocks * bs, m.num_key_value_heads, m.head_dim)
        scratch = [
            (
                torch.zeros(shape, dtype=self.dtype, device=self.device),
                torch.zeros(shape, dtype=self.dtype, device=self.device),
            )
            for _ in range(m.num_hidden_layers)
        ]
        last_row: dict[int, int] = {}
        input_ids: list[int] = []
        for chunk in ordered:
            input_ids.extend(chunk.seq.token_ids)
            last_row[id(chunk)] = len(input_ids) - 1
        ids = torch.tensor(input_ids, dtype=torch.long).to(self.device, non_blocking=True)
        hidden = self.model.forward(ids, self._metadata(groups), scratch)
        rows = torch.tensor([last_row[id(chunk)] for chunk in chunks], dtype=torch.long).to(self.device)
        return self.model.final_norm(hidden.index_select(0, rows)).float()

    def _metadata(self, parts: list[list[ScheduledChunk]]) -> AttentionMetadata:
        groups: list[AttentionGroup] = []
        positions: list[torch.Tensor] = []
        slots: list[torch.Tensor] = []
        for part in parts:
            index = self._group(part)
            groups.append(index.group)
            positions.append(index.positions)
            slots.append(index.slot_mapping)
        pos = positions[0] if len(positions) == 1 else torch.cat(positions)
        slot = slots[0] if len(slots) == 1 else torch.cat(slots)
        dev = self.device
        pos = pos.to(dev, non_blocking=True)
        return AttentionMetadata(
            slot_mapping=slot.to(dev, non_blocking=True),
            groups=groups,
            cos=self.cos[pos].unsqueeze(1),
            sin=self.sin[pos].unsqueeze(1),
        )

    def _group(self, part: list[ScheduledChunk]) -> _GroupIndex:
        """Index tensors for one attention group (all built with a few torch ops, no
        per-token Python)."""
        bs = self.block_size
        B = len(part)
        starts = [chunk.seq.num_computed_tokens for chunk in part]
        q_lens = [chunk.num_tokens for chunk in part]
        tables = [chunk.seq.block_ids for chunk in part]
        max_blocks = max(len(t) for t in tables)
        max_q = max(q_lens)
        num_tokens = sum(q_lens)
        table = torch.tensor([t + [0] * (max_blocks - len(t)) for t in tables], dtype=torch.long)
        starts_t = torch.tensor(starts, dtype=torch.long)
        if max_q == 1:
            positions = starts_t
            seq_idx = torch.arange(B)
            q_dest = None
        else:
            q_lens_t = torch.tensor(q_lens, dtype=torch.long)
            seq_idx = torch.repeat_interleave(torch.arange(B), q_lens_t, output_size=num_tokens)
            first = torch.cumsum(q_lens_t, 0) - q_lens_t
            offsets = torch.arange(num_tokens) - first[seq_idx]
            positions = starts_t[seq_idx] + offsets
            q_dest = seq_idx * max_q + offsets
        slot_mapping = table[seq_idx, positions // bs] * bs + positions % bs
        kpos = torch.arange(max_blocks * bs)
        qpos = starts_t[:, None] + torch.arange(max_q)[None, :]
        # An additive float mask: a bool one is converted inside every SDPA call (4 per layer pair).
        allowed = (kpos[None, None, :] <= qpos[:, :, None]).unsqueeze(1)
        mask = torch.zeros(allowed.shape, dtype=self.dtype).masked_fill_(~allowed, float("-inf"))
        dev = self.device
        group = AttentionGroup(
            num_tokens=num_tokens,
            batch_size=B,
            max_q=max_q,
            gather_index=table.to(dev, non_blocking=True),
            mask=mask.to(dev, non_blocking=True),
            q_dest=None if q_dest is None else q_dest.to(dev, non_blocking=True),
        )
        return _GroupIndex(group, positions, slot_mapping)


# What one more attention group costs (its index tensors, gathers and SDPA call), in the
# unit of the padding it saves. For decodes the unit is one sequence's block of context;
# for prefill chunks, one padded query token (its attention row is much dearer).
DECODE_GROUP_COST_IN_BLOCKS = 32
PREFILL_GROUP_COST_IN_TOKENS = 64
MAX_GROUPS = 4


def split_by_context(decodes: list[ScheduledChunk]) -> list[list[ScheduledChunk]]:
    """Decodes attend over contexts padded to the longest one in their group; group them
    by context length (in blocks) when that saves enough padding."""
    if len(decodes) < 8:
        return [decodes] if decodes else []
    return split_padded(decodes, lambda chunk: len(chunk.seq.block_ids), DECODE_GROUP_COST_IN_BLOCKS)


def split_prefills(prefills: list[ScheduledChunk]) -> list[list[ScheduledChunk]]:
    """Prefill chunks pad their queries to the longest chunk in the group (and attend over
    a square-ish padded mask); group them by chunk length when that saves enough."""
    if len(prefills) < 2:
        return [prefills] if prefills else []
    return split_padded(prefills, lambda chunk: chunk.num_tokens, PREFILL_GROUP_COST_IN_TOKENS)


def split_padded(items: list, size_of, group_cost: int) -> list[list]:
    """Partition items into at most MAX_GROUPS groups of similar size, minimising the
    padded total (group length x largest size in the group) plus `group_cost` per extra
    group. Candidates: the best single split point and equal-count splits, all O(n)."""
    ordered = sorted(items, key=size_of)
    sizes = [size_of(item) for item in ordered]
    n = len(sizes)
    best_cost, best_bounds = n * sizes[-1], [n]
    for i in range(1, n):  # the best two-way split
        cost = i * sizes[i - 1] + (n - i) * sizes[-1] + group_cost
        if cost < best_cost:
            best_cost, best_bounds = cost, [i, n]
    for k in range(3, min(MAX_GROUPS, n) + 1):
        bounds = [round(n * j / k) for j in range(1, k + 1)]
        cost, start = group_cost * (k - 1), 0
        for end in bounds:
            cost += (end - start) * sizes[end - 1]
            start = end
        if cost < best_cost:
            best_cost, best_bounds = cost, bounds
    if len(best_bounds) == 1:
        return [items]
    groups, start = [], 0
    for end in best_bounds:
        groups.append(ordered[start:end])
        start = end
    return groups
