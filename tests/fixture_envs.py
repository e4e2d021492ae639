"""Environments that several test folders play: a parity game any model wins about half the time
(GRPO gets a signal even from a random policy), and one whose step never returns; the designer answer
that proposes one, and the overrides of a small self-play run that plays them.

The parity game is winnable by chance on purpose, which is what the validator's trivial-policy check
refuses: these runs turn that check off (``design.validation.trivial_seeds=0``). Malformed actions
(the validator's probes: empty, or holding "%") never win it, as the battery requires."""

PARITY = '''
class ParityEnv:
    """Win when the seed plus the length of the action is even. Malformed actions never win."""

    def __init__(self, max_turns=2):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.seed = 0 if seed is None else seed
        self.turn = 0
        return "Say something of the right length.", {}

    def step(self, action):
        self.turn += 1
        won = (self.seed + len(action)) % 2 == 0 and action.strip() != "" and "%" not in action
        if won:
            return "yes", 1.0, True, False, {}
        return "no", 0.0, False, self.turn >= self.max_turns, {}

    def solution(self):
        return ["xx" if self.seed % 2 == 0 else "x"]
'''
HANGS = PARITY.replace("self.turn += 1", "while True:\n            pass").replace("ParityEnv", "HangEnv")


def designer_output(source: str) -> str:
    return f"```python\n{source}```\n<hint>Count the characters.</hint>"


# The designer answers of these tests are scripted whole modules, with no warm-up, and the parity game
# counts every character the model writes (no forced opening): the "question" form, the warm-up and
# the answer-first turns of the CPU default have their own tests (tests/designer/test_warmup.py).
SCRIPTED = [
    "design.form='module'",
    "design.validation.trivial_seeds=0",
    "warmup.designs=0",
    "rollout.action_prefix={}",
    "rollout.action_stop={}",
]
SMALL = [
    *SCRIPTED,
    "loop.iterations=2",
    "loop.designs_per_iteration=2",
    "loop.envs_per_iteration=2",
    "loop.plays_per_env=4",
    "rollout.max_turns=2",
    "rollout.max_new_tokens=8",
    "design.max_new_tokens=2048",
    "sandbox.call_timeout_s=0.5",
    "design.validation.call_timeout_s=0.5",
    "train.learning_rate=1e-3",
]


def scripted_roles(model, tokenizer, designs: list[str]) -> dict:
    """SelfPlay's two roles for a test: the tiny model plays (and trains), a scripted designer writes
    ``designs`` in turn (real token ids of the same tokenizer). ``SelfPlay(config, dir, **roles)``."""
    from spade_rl.policy import FakePolicy
    from spade_rl.policy.transformers_backend import TransformersPolicy

    return {
        "policy": TransformersPolicy(model, tokenizer),
        "designer_policy": FakePolicy(designs, tokenizer=tokenizer),
    }
