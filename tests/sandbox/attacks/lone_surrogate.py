"""Attack: lone surrogates (text that is not valid UTF-8) in an observation, an ``info`` key and an
exception message, which JSON carries as ``\\ud800``: the tokenizer, the chat template or SQLite
raise on them later, in the trusted process. Stopped at the protocol boundary, which replaces each
by U+FFFD; the environment is then refused because its ``step`` raises."""


class SurrogateEnv:
    def __init__(self, max_turns=5):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "Say \ud800 anything.", {"\udc00key": "\ud83d"}

    def step(self, action):
        raise ValueError("bad action \udfff" + action[:10])

    def solution(self):
        return "anything"
