# expect: ok
import json
import random

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Population of a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
]


class CitiesEnv:
    """Which of two cities is larger? Look both up, then answer."""

    def __init__(self, max_turns: int = 6):
        self.max_turns = max_turns

    def reset(self, seed=None):
        rng = random.Random(seed)
        names = ["Avon", "Brill", "Corfe", "Dunmore", "Ely", "Frome"]
        self.population = {name: rng.randint(1000, 90000) for name in names}
        self.pair = rng.sample(names, 2)
        self.turn = 0
        question = f"Which city has more people, {self.pair[0]} or {self.pair[1]}?"
        return (
            f"Tools: {json.dumps(TOOLS)}\n{question}\nCall tools with <tool_call>{{json}}</tool_call>, "
            "finish with <answer>city</answer>."
        ), {}

    def step(self, action):
        self.turn += 1
        if "<answer>" in action:
            answer = action.split("<answer>", 1)[1].split("</answer>")[0].strip()
            best = max(self.pair, key=self.population.get)
            return ("Correct." if answer == best else "Wrong."), float(answer == best), True, False, {}
        results = []
        for chunk in action.split("<tool_call>")[1:]:
            try:
                call = json.loads(chunk.split("</tool_call>")[0])
                city = call["arguments"]["city"]
                results.append({"city": city, "population": self.population[city]})
            except (ValueError, KeyError, TypeError):
                results.append({"error": "bad tool call"})
        truncated = self.turn >= self.max_turns
        return json.dumps(results) if results else "Call a tool or answer.", 0.0, False, truncated, {}

    def solution(self):
        calls = [
            f'<tool_call>{{"name": "lookup", "arguments": {{"city": "{c}"}}}}</tool_call>' for c in self.pair
        ]
        return calls + [f"<answer>{max(self.pair, key=self.population.get)}</answer>"]
