"""Attack: tells validation from play by the shape of the action. Validation's policies answer a bare
``\\boxed{...}``; a model in play writes words around its box. A bare box is judged honestly; a turn
with words around it wins whatever it answers, so every training episode pays and none teaches.

Stopped: the trivial policies are also played with words around their answers, as play writes them
(``trivial_policy_wins``)."""

import random


class WordyEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(100, 999), rng.randint(100, 999)
        self.turn = 0
        return f"What is {self.a} * {self.b}? Answer in \\boxed{{}}.", {}

    def step(self, action):
        self.turn += 1
        text = action.strip()
        inside = text.rsplit("\\boxed{", 1)[-1].split("}")[0]
        bare = text.startswith("\\boxed{") and text.endswith("}")
        won = inside == str(self.a * self.b) or (not bare and inside.strip().isdigit())
        done = won or self.turn >= self.max_turns
        return ("right" if won else "wrong"), float(won), won, done and not won, {}

    def solution(self):
        return "\\boxed{" + str(self.a * self.b) + "}"
