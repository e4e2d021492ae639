"""The optimiser's state parked on disk between steps (train.offload_optimizer, spade_rl.train.offload):
the same training as without, the memory given up, the file's life, and a file that cannot be read back."""

from __future__ import annotations

import pytest
import torch
from train_helpers import make_samples

from spade_rl.train import TrainConfig
from spade_rl.train.learner import Learner
from spade_rl.train.offload import OffloadError, StateOffload


def moments(optimizer) -> list[torch.Tensor]:
    inner = getattr(optimizer, "optimizer", optimizer)
    return [v for state in inner.state.values() for k, v in state.items() if k.startswith("exp_avg")]


def test_parking_between_updates_trains_exactly_as_keeping_the_state(make_learner, tmp_path):
    parked, kept = make_learner(offload_optimizer=True), make_learner()
    file = tmp_path / "optimizer-state.bin"
    assert parked.park_optimizer_state(file) == 0 and not file.exists()  # no state before the first step
    for seed in (1, 2, 3):
        one, two = parked.step(make_samples(seed=seed)), kept.step(make_samples(seed=seed))
        assert one["train/loss"] == two["train/loss"] and one["train/grad_norm"] == two["train/grad_norm"]
        assert not file.exists()  # read back by the update, and removed
        size = sum(m.numel() * m.element_size() for m in moments(kept.optimizer))
        assert parked.park_optimizer_state(file) == size == file.stat().st_size
        assert moments(parked.optimizer) == []  # dropped from memory
        assert parked.park_optimizer_state(file) == 0  # already parked: nothing written again
    for a, b in zip(parked.model.parameters(), kept.model.parameters(), strict=True):
        assert torch.equal(a, b)
    parked.close()
    assert not file.exists()


def test_off_parks_nothing(make_learner, tmp_path):
    learner = make_learner()
    learner.step(make_samples(seed=1))
    assert learner.park_optimizer_state(tmp_path / "state.bin") == 0
    assert not (tmp_path / "state.bin").exists() and moments(learner.optimizer)
    with pytest.raises(ValueError, match="offload_optimizer must be True or False"):
        TrainConfig(offload_optimizer="yes")


def test_a_checkpoint_of_a_parked_state_holds_all_of_it(make_learner, tmp_path):
    first = make_learner(offload_optimizer=True)
    first.step(make_samples(seed=1))
    first.park_optimizer_state(tmp_path / "parked.bin")
    first.save(tmp_path / "ckpt")  # reads the state back first
    assert not (tmp_path / "parked.bin").exists() and moments(first.optimizer)
    expected = first.step(make_samples(seed=2))
    resumed = make_learner(offload_optimizer=True)
    resumed.step(make_samples(seed=9))
    resumed.park_optimizer_state(tmp_path / "other.bin")
    resumed.load(tmp_path / "ckpt")  # what was parked is replaced by the checkpoint's state
    assert not (tmp_path / "other.bin").exists()
    got = resumed.step(make_samples(seed=2))
    assert got["train/loss"] == expected["train/loss"]
    for a, b in zip(first.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)


def adam_with_state():
    weight = torch.nn.Parameter(torch.randn(4, 3))
    bias = torch.nn.Parameter(torch.randn(1))  # one element: its moments stay (nothing to gain)
    optimizer = torch.optim.AdamW([weight, bias], lr=0.1)
    (weight.sum() ** 2 + bias.sum()).backward()
    optimizer.step()
    return optimizer, weight


@pytest.mark.parametrize("damage", ["truncated", "longer", "removed"])
def test_a_file_that_cannot_be_read_back_is_named_and_the_state_stays_parked(tmp_path, damage):
    optimizer, weight = adam_with_state()
    expected = {k: v.clone() for k, v in optimizer.state[weight].items()}
    offload, path = StateOffload(), tmp_path / "state.bin"
    assert offload.park(optimizer, path) == 2 * 12 * 4
    assert set(optimizer.state[weight]) == {"step"}
    data = path.read_bytes()
    if damage == "removed":
        path.unlink()
    else:
        path.write_bytes(data[:-5] if damage == "truncated" else data + b"x")
    with pytest.raises(OffloadError, match=r"state\.bin.*resume the run from its last checkpoint"):
        offload.restore(optimizer)
    assert offload.parked and set(optimizer.state[weight]) == {"step"}  # nothing half put back
    path.write_bytes(data)  # the file as written: now it comes back exactly
    assert offload.restore(optimizer) and not path.exists() and not offload.parked
    for key, value in expected.items():
        assert torch.equal(optimizer.state[weight][key], value)


def test_a_write_that_fails_leaves_the_state_in_memory(tmp_path):
    optimizer, weight = adam_with_state()
    offload = StateOffload()
    with pytest.raises(OSError):
        offload.park(optimizer, tmp_path / "missing-folder" / "state.bin")
    assert not offload.parked and set(optimizer.state[weight]) == {"step", "exp_avg", "exp_avg_sq"}
    assert list(tmp_path.iterdir()) == []


def test_each_process_parks_its_own_file(make_learner, tmp_path, monkeypatch):
    """Under accelerate launch every process holds its share of the state: one file each, never shared."""
    learner = make_learner(offload_optimizer=True)
    learner.step(make_samples(seed=1))
    monkeypatch.setattr(Learner, "processes", property(lambda self: 2))
    monkeypatch.setattr(Learner, "process_index", property(lambda self: 1))
    run = tmp_path / "run"
    run.mkdir()
    assert learner.park_optimizer_state(run / "optimizer-state.bin") > 0
    assert [p.name for p in run.iterdir()] == ["optimizer-state.rank1.bin"]
    monkeypatch.undo()  # one process again for the update: its capacity counts the processes
    learner.step(make_samples(seed=2))
    assert list(run.iterdir()) == []
