"""TRL's padded batch cut into length-sorted, trimmed micro-batches (spade_rl.train.micro_batches)."""

from __future__ import annotations

import pytest
import torch

from spade_rl.train.micro_batches import split_by_length, trim_padding


def test_split_by_length_and_trim_padding():
    pad = 0
    prompts = torch.tensor([[pad, pad, 5, 6], [pad, pad, pad, 7], [1, 2, 3, 4], [pad, 8, 9, 9]])
    prompt_mask = (prompts != pad).long()
    completions = torch.tensor([[5, pad, pad], [5, 6, 7], [5, 6, pad], [5, pad, pad]])
    completion_mask = (completions != pad).long()
    batch = {
        "prompt_ids": prompts,
        "prompt_mask": prompt_mask,
        "completion_ids": completions,
        "completion_mask": completion_mask,
        "old_per_token_logps": completion_mask.float() * -1,
        "advantages": torch.tensor([0.0, 1.0, 2.0, 3.0]),
        "num_items_in_batch": torch.tensor(7),
        "labels": ["a", "b", "c", "d"],
    }
    first, second = split_by_length(batch, 2)
    # lengths 3, 4, 6, 4: row 2 first, then rows 1 and 3 (ties keep their order), then row 0
    assert first["advantages"].tolist() == [2.0, 1.0] and first["labels"] == ["c", "b"]
    assert second["advantages"].tolist() == [3.0, 0.0] and second["labels"] == ["d", "a"]
    assert int(first["num_items_in_batch"]) == 7
    cut = trim_padding(second)
    assert cut["prompt_ids"].tolist() == [[8, 9, 9], [pad, 5, 6]]
    assert cut["completion_ids"].tolist() == [[5], [5]]
    assert cut["old_per_token_logps"].shape == (2, 1)
    assert cut["advantages"].tolist() == [3.0, 0.0]
    with pytest.raises(ValueError, match="equal micro-batches"):
        split_by_length(batch, 3)
