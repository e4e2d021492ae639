"""The paper configuration scaled down (tiny model, two iterations): every reference mechanism spade-rl
has goes through one real run (skill rotation, the separate hint call at its own temperature, retries of
invalid designs, the reference memory, the delayed designer reward, scaled designer advantages, recomputed
old log-probs with truncated importance sampling, the reference's optimiser settings), through the real
sandbox; once with the paper's blend and once with the learning-potential ablation."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixture_envs import HANGS, PARITY
from spade_rl.loop.config import load_config
from spade_rl.loop.run import SelfPlay
from spade_rl.policy import FakePolicy, tiny_random_model
from spade_rl.policy.transformers_backend import TransformersPolicy

PAPER = Path(__file__).resolve().parents[2] / "configs" / "spade-paper-games.toml"


def scaled_down(tmp_path, *extra: str) -> list[str]:
    """A paper configuration at tiny scale: two iterations, D = R = 1, two designs and two environments of
    four plays and four with the hint, the tiny model on CPU, short turns."""
    return [
        "policy.transformers.device='cpu'",
        "policy.transformers.dtype='float32'",
        "train.bf16=false",
        "train.gradient_checkpointing=false",
        "train.report_to='none'",
        f"train.output_dir='{tmp_path / 'trainer'}'",
        "train.learning_rate=1e-3",
        "train.group_size=4",
        "train.per_device_train_batch_size=4",
        "train.gradient_accumulation_steps=6",  # 2 environments and 2 skills of 2 design phases at the end
        "loop.iterations=2",
        "loop.regenerate_every=1",
        "rewards.delay=1",  # D = regenerate_every, as in both paper configurations
        "loop.designs_per_iteration=2",
        "loop.envs_per_iteration=2",
        "loop.plays_per_env=4",
        "loop.hint_plays_per_env=4",  # the paper configurations' 16 measure regret at full scale
        "rollout.max_turns=2",
        "rollout.max_new_tokens=8",
        "rollout.max_context_tokens=2048",
        "design.max_new_tokens=2048",
        "design.hint_max_new_tokens=32",
        "design.validation.trivial_seeds=0",
        "sandbox.pool_size=2",
        "sandbox.max_workers=8",
        "pool.reference=['guess']",
        "pool.reference_kwargs={guess={high=3}}",
        *extra,
    ]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["blend", "learning_potential"])
def test_the_paper_recipe_runs_end_to_end_at_tiny_scale(tmp_path, mode):
    overrides = scaled_down(
        tmp_path,
        f"rewards.mode='{mode}'",
        "design.validation.call_timeout_s=0.5",
        "sandbox.call_timeout_s=0.5",
    )
    config = load_config(PAPER, overrides, processes=1)
    assert config.design.hint_mode == "separate" and config.archive.memory_mode == "reference"
    assert config.train.old_logprobs == "recompute" and config.train.tis_cap == 2.0
    assert config.rewards.scale == "reference" and config.rewards.mask_negative
    assert load_config(PAPER, processes=1).rewards.delay == 4
    model, tokenizer = tiny_random_model(seed=0)
    written = []

    judged = []

    def designer_script(chat):
        """The first two designs: one valid, one that hangs (then retried: valid); hints to every call; the
        LLM validator (on for games: issue 56) accepts every design it reads."""
        if chat[0]["content"].startswith("You write short hints"):
            return "<hint>Count the characters.</hint>"
        if "Can an agent that understands this game win it?" in chat[-1]["content"]:
            judged.append(chat)
            return "The key follows from the question. \\boxed{yes}"
        written.append(chat)
        source = {1: PARITY, 2: HANGS}.get(len(written), PARITY.replace("ParityEnv", "RetriedEnv"))
        return f"```python\n{source}```"

    designer = FakePolicy(designer_script, tokenizer=tokenizer)
    with SelfPlay(
        config, tmp_path / "run", policy=TransformersPolicy(model, tokenizer), designer_policy=designer
    ) as run:
        metrics = list(run.iterations())
        optimizer = run.learner.optimizer
        assert optimizer.param_groups[0]["betas"] == (0.9, 0.98)
        assert any(g["weight_decay"] == 0.1 for g in optimizer.param_groups)
    assert [m["iteration"] for m in metrics] == [1, 2]
    first = metrics[0]
    assert first["designer/reasons"] == {"ok": 2, "timeout": 1}  # the hanging slot was asked again
    assert first["designer/proposed"] == 3
    # Delayed: the two valid designs of iteration 1 are held (the hanging one, retried, has no gradient) and
    # trained in iteration 2 with the two of iteration 2 (the last iteration rewards everything held).
    assert (first["designer/held"], first["designer/rewarded"], first["samples/designer"]) == (2, 0, 0)
    assert (metrics[1]["designer/held"], metrics[1]["designer/rewarded"]) == (0, 4)
    if mode == "learning_potential":
        assert any(key.startswith("designer/lp/") for key in metrics[1])
    # min(N_agent / N_designer * regenerate_every 1, 50): the 4 designs trained in iteration 2 count
    last = metrics[1]
    assert last.get("designer/advantage_scale", 1.0) == (min(last["samples/agent"] / 4, 50) or 1.0)
    assert any("train/loss" in m for m in metrics)  # updated, with recomputed old log-probs and TIS
    # Per iteration a design call, a hint call and the validator's call (iteration 1: again for the retried
    # slot); the validator read every design that passed the battery (iteration 1: 2, iteration 2: 2).
    assert len(designer.calls) == 9 and len(written) == 5 and len(judged) == 4
    assert config.design.validation.llm_validator.enabled


TOOLS = PAPER.with_name("spade-paper-tool-use.toml")

# A tool-kit design (a ToolUseBaseEnv subclass, as the tool_kit form asks for it after "```python\nclass "):
# the cheapest flight between two cities, drawn from the seed.
FLIGHTS = """NAMEEnv(ToolUseBaseEnv):
    tools = {
        "search_flights": ("Flight ids between two cities.", {"origin": "string", "destination": "string"}),
        "get_price": ("The price of a flight in dollars.", {"flight_id": "string"}),
    }
    hint = "Search first, then price every flight found and keep the lowest."

    def make(self, rng):
        self.origin, self.destination = rng.sample(["Oslo", "Lima", "Pune", "Kyiv"], 2)
        self.flights = {f"F{n}": rng.randint(90, 900) for n in rng.sample(range(100, 1000), 4)}
        cheapest = min(self.flights, key=self.flights.get)
        question = f"The cheapest flight from {self.origin} to {self.destination}: its price?"
        return question, self.flights[cheapest]

    def tool_search_flights(self, origin, destination):
        return sorted(self.flights) if (origin, destination) == (self.origin, self.destination) else []

    def tool_get_price(self, flight_id):
        return self.flights[flight_id]

    def plan(self):
        search = ("search_flights", {"origin": self.origin, "destination": self.destination})
        return [search, [("get_price", {"flight_id": f}) for f in sorted(self.flights)]]
```"""
# One that ignores its seed: the reset gate (seeds 0-2 in the tool-use configuration) refuses it.
FIXED = """FixedEnv(ToolUseBaseEnv):
    tools = {"get_price": ("The price of a flight in dollars.", {"flight_id": "string"})}
    hint = "Ask for the price of the flight the question names."

    def make(self, rng):
        return "What is the price in dollars of flight F1?", 120

    def tool_get_price(self, flight_id):
        return 120 if flight_id == "F1" else 0

    def plan(self):
        return [("get_price", {"flight_id": "F1"})]
```"""


@pytest.mark.slow
def test_the_paper_tool_use_recipe_runs_end_to_end_at_tiny_scale(tmp_path):
    """The tool-use configuration scaled down: designs in the kit form (ToolUseBaseEnv subclasses), the reset
    gate, the LLM validator (the designer's own model reads each design), retries, the separate hint, the
    delayed reward; the tiny model plays them through the real sandbox and trains."""
    # Four turns: a kit design's solution searches, prices, then answers.
    overrides = scaled_down(
        tmp_path, "rollout.max_turns=4", "design.validation.llm_validator.max_new_tokens=64"
    )
    config = load_config(TOOLS, overrides, processes=1)
    validation = config.design.validation
    assert (
        config.design.form == "tool_kit"
        and validation.reset_gate_seeds == 3
        and validation.llm_validator.enabled
    )
    model, tokenizer = tiny_random_model(seed=0)
    designs = iter([FLIGHTS.replace("NAME", "One"), FLIGHTS.replace("NAME", "Two"), FIXED])
    audited = []

    def designer_script(chat):
        if "You audit generated Python tool-use" in chat[0]["content"]:
            audited.append(chat)
            return "Every value the answer needs is returned by a tool. \\boxed{yes}"
        if chat[0]["content"].startswith("You write short hints"):
            return "<hint>Price every flight.</hint>"
        return next(designs, None) or FLIGHTS.replace("NAME", f"Later{len(audited)}")

    designer = FakePolicy(designer_script, tokenizer=tokenizer)
    with SelfPlay(
        config, tmp_path / "run", policy=TransformersPolicy(model, tokenizer), designer_policy=designer
    ) as run:
        metrics = list(run.iterations())
        records = [run.archive.get(i) for i in run.archive.ids()]
    assert [m["iteration"] for m in metrics] == [1, 2]
    assert metrics[0]["designer/reasons"] == {"ok": 2}
    # Iteration 2: the seed-blind design is refused by the reset gate, and its slot asked again.
    assert metrics[1]["designer/reasons"] == {"ok": 2, "same_instance_every_seed": 1}
    designed = [r for r in records if r.setting == "tool_use"]
    assert sorted(r.valid for r in designed) == [False, True, True, True, True]
    assert all(r.metadata["llm_validator"].endswith("\\boxed{yes}") for r in designed if r.valid)
    assert len(audited) == 4  # the validator read every design that passed validation, no other
    assert (metrics[0]["designer/held"], metrics[1]["designer/rewarded"]) == (2, 4)
    # The designs were played (the random model wins no tool task, so the update has no signal here: the
    # games test above covers the update).
    assert metrics[1]["agent/envs"] >= 2 and metrics[1]["agent/mean_turns"] > 0
