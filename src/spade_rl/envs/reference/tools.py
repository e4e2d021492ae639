"""Store inventory tools: answer a shopping question by calling tools on a small product database.

A tool-use environment. ``reset`` builds a store of 12 products (ids, prices, stock drawn from the
seed) and asks one question that needs several tool calls: the price of an order, the cheapest
product in stock in a category, or the units in stock in a category. The tools are described as
OpenAI-style JSON schemas in the first observation. An action holds one or more tool calls,
``<tool_call>{"name": "get_product", "arguments": {"product_id": "P123"}}</tool_call>``, answered in
order as ``<tool_response>{json}</tool_response>``; or it holds ``<answer>...</answer>``, which ends
the episode. Invalid JSON, unknown tools and bad arguments get an error response, never an exception.
An exactly right answer wins (reward 1.0); numbers are compared as numbers, names ignoring case.
"""

import json
import random
import re

CATALOG = {
    "kitchen": ["Blue Ceramic Mug", "Steel Water Bottle", "Bamboo Cutting Board", "Cast Iron Pan"],
    "clothing": ["Wool Beanie", "Rain Jacket", "Cotton Socks", "Linen Shirt"],
    "office": ["LED Desk Lamp", "Spiral Notebook", "Gel Pen Set", "Desk Organizer"],
}
MAX_CALLS_PER_TURN = 10

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_products",
            "description": "Find products whose name contains the query (case-insensitive).",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "part of a product name"}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_category",
            "description": "List the ids and names of all products in a category.",
            "parameters": {
                "type": "object",
                "properties": {"category": {"type": "string", "enum": sorted(CATALOG)}},
                "required": ["category"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_product",
            "description": "Get a product's name, category, price in dollars and units in stock.",
            "parameters": {
                "type": "object",
                "properties": {"product_id": {"type": "string", "description": "an id such as P123"}},
                "required": ["product_id"],
                "additionalProperties": False,
            },
        },
    },
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}

NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?")
MAX_NUMBER_DIGITS = 15  # longer numbers are never right, and would overflow round(float(...))

PROTOCOL = (
    'To call a tool, write <tool_call>{"name": TOOL_NAME, "arguments": {...}}</tool_call>; you may put '
    "several tool calls in one message and each gets a <tool_response> in order. When you know the "
    "answer, write <answer>YOUR ANSWER</answer>; this ends the episode."
)


def tagged(text, tag):
    """The contents of every complete <tag>...</tag> in ``text``, in order.

    A plain scan with str.find: a lazy regex would take quadratic time on text full of opening tags.
    """
    opening, closing = f"<{tag}>", f"</{tag}>"
    found, position = [], 0
    while (start := text.find(opening, position)) != -1:
        end = text.find(closing, start + len(opening))
        if end == -1:
            break
        found.append(text[start + len(opening) : end])
        position = end + len(closing)
    return found


def argument_errors(schema, arguments):
    """What is wrong with ``arguments`` for this (flat, string-only) JSON schema; [] when valid."""
    if not isinstance(arguments, dict):
        return ["arguments must be a JSON object"]
    errors = [f"missing argument {name!r}" for name in schema["required"] if name not in arguments]
    for name, value in arguments.items():
        spec = schema["properties"].get(name)
        if spec is None:
            errors.append(f"unexpected argument {name!r}; allowed: {', '.join(schema['properties'])}")
        elif not isinstance(value, str):
            errors.append(f"argument {name!r} must be a string")
        elif "enum" in spec and value not in spec["enum"]:
            errors.append(f"argument {name!r} must be one of {', '.join(spec['enum'])}")
    return errors


def make_store(rng):
    """{product id: product} for every catalog product, with ids, prices and stock drawn from ``rng``."""
    count = sum(len(names) for names in CATALOG.values())
    ids = rng.sample(range(100, 1000), count)
    prices = rng.sample(range(300, 5000), count)  # distinct prices in cents: "cheapest" has one answer
    store = {}
    for category, names in CATALOG.items():
        stocks = [0 if rng.random() < 0.3 else rng.randint(1, 40) for _ in names]
        if not any(stocks):
            stocks[-1] = rng.randint(1, 40)  # every category keeps at least one product in stock
        for name, stock in zip(names, stocks, strict=True):
            store[f"P{ids.pop()}"] = {
                "name": name,
                "category": category,
                "cents": prices.pop(),
                "stock": stock,
            }
    return store


def normalise(text):
    """Lower case, single spaces, no surrounding quotes or full stop: for comparing names."""
    return " ".join(text.strip().strip(".\"'").lower().split())


class ToolsEnv:
    def __init__(self, max_turns: int = 10):
        self.max_turns = max_turns
        self._turn = 0
        self._done = True  # no episode until reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        rng = random.Random(0 if seed is None else seed)
        self._products = make_store(rng)
        self._question, self._answer, self._plan = rng.choice(
            [self._order_question, self._cheapest_question, self._stock_question]
        )(rng)
        self._turn = 0
        self._done = False
        tool_lines = "\n".join(json.dumps(tool) for tool in TOOLS)
        observation = (
            "You are a store assistant with access to the store's product database through tools.\n"
            f"Tools (OpenAI function schemas, one per line):\n{tool_lines}\n{PROTOCOL}\n"
            f"You have {self.max_turns} turns.\n\nQuestion: {self._question}"
        )
        return observation, self._info("start")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            return "The episode is over. Call reset() to start again.", 0.0, True, False, self._info("over")
        self._turn += 1
        action = action if isinstance(action, str) else ""

        answers = tagged(action, "answer")
        if answers:
            self._done = True
            if self._is_right(answers[-1]):
                return "Correct answer.", 1.0, True, False, self._info("correct")
            return "Wrong answer.", 0.0, True, False, self._info("wrong")

        calls = tagged(action, "tool_call")
        if calls:
            responses = [self._respond(call) for call in calls[:MAX_CALLS_PER_TURN]]
            skipped = len(calls) - len(responses)
            responses += [{"error": f"not run: at most {MAX_CALLS_PER_TURN} tool calls per turn"}] * skipped
            observation = "\n".join(f"<tool_response>{json.dumps(r)}</tool_response>" for r in responses)
            status = "error" if any("error" in r for r in responses) else "tools"
        else:
            observation, status = f"No tool call or answer found. {PROTOCOL}", "invalid"

        if self._turn >= self.max_turns:
            self._done = True
            return observation + "\nYou are out of turns.", 0.0, False, True, self._info(status)
        observation += f"\nTurns left: {self.max_turns - self._turn}."
        return observation, 0.0, False, False, self._info(status)

    def solution(self) -> list[str]:
        """Look the products up (one turn per planned batch of calls), then answer."""
        actions = []
        for batch in self._plan:
            calls = [json.dumps({"name": name, "arguments": arguments}) for name, arguments in batch]
            actions.append("".join(f"<tool_call>{call}</tool_call>" for call in calls))
        return [*actions, f"<answer>{self._answer}</answer>"]

    def close(self) -> None:
        pass

    # Question kinds: each returns (question, answer text, plan = list of batches of tool calls).

    def _order_question(self, rng):
        first, second = rng.sample(sorted(self._products), 2)
        count_1, count_2 = rng.randint(2, 5), rng.randint(2, 5)
        cents = count_1 * self._products[first]["cents"] + count_2 * self._products[second]["cents"]
        name_1, name_2 = self._products[first]["name"], self._products[second]["name"]
        question = (
            f"How much do {count_1} x {name_1} and {count_2} x {name_2} cost together, in dollars? "
            "Answer with the number only."
        )
        searches = [("search_products", {"query": name_1}), ("search_products", {"query": name_2})]
        lookups = [("get_product", {"product_id": first}), ("get_product", {"product_id": second})]
        return question, f"{cents / 100:.2f}", [searches, lookups]

    def _cheapest_question(self, rng):
        category = rng.choice(sorted(CATALOG))
        available = [pid for pid in self._in(category) if self._products[pid]["stock"] > 0]
        cheapest = min(available, key=lambda pid: self._products[pid]["cents"])
        question = f"Which {category} product that is in stock has the lowest price? Answer with its name."
        lookups = [("get_product", {"product_id": pid}) for pid in self._in(category)]
        return (
            question,
            self._products[cheapest]["name"],
            [[("list_category", {"category": category})], lookups],
        )

    def _stock_question(self, rng):
        category = rng.choice(sorted(CATALOG))
        units = sum(self._products[pid]["stock"] for pid in self._in(category))
        question = (
            f"How many units of {category} products are in stock in total? Answer with the number only."
        )
        lookups = [("get_product", {"product_id": pid}) for pid in self._in(category)]
        return question, str(units), [[("list_category", {"category": category})], lookups]

    def _in(self, category):
        return [pid for pid, product in self._products.items() if product["category"] == category]

    def _respond(self, text):
        """The JSON-able response to one tool call's text: a result, or {"error": ...}."""
        try:
            call = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
            return {"error": f"invalid JSON in tool call ({exc}); {PROTOCOL}"}
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return {"error": 'a tool call must be a JSON object {"name": ..., "arguments": {...}}'}
        name, arguments = call["name"], call.get("arguments", {})
        if name not in SCHEMAS:
            return {"error": f"unknown tool {name!r}; available tools: {', '.join(SCHEMAS)}"}
        if isinstance(arguments, str):  # OpenAI style: the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                return {"error": "arguments is a string that is not valid JSON"}
        errors = argument_errors(SCHEMAS[name], arguments)
        if errors:
            return {"error": f"bad arguments for {name}: {'; '.join(errors)}"}
        return self._run(name, arguments)

    def _run(self, name, arguments):
        """Run one tool on valid arguments."""
        if name == "search_products":
            query = arguments["query"].strip().lower()
            found = [pid for pid, p in self._products.items() if query and query in p["name"].lower()]
            return {"results": [self._summary(pid) for pid in found]}
        if name == "list_category":
            return {"results": [self._summary(pid) for pid in self._in(arguments["category"])]}
        product_id = arguments["product_id"].strip().upper()
        if product_id not in self._products:
            return {"error": f"no product with id {arguments['product_id']!r}"}
        product = self._products[product_id]
        return {
            **self._summary(product_id),
            "category": product["category"],
            "price": product["cents"] / 100,
            "stock": product["stock"],
        }

    def _summary(self, pid):
        return {"product_id": pid, "name": self._products[pid]["name"]}

    def _is_right(self, text):
        expected = self._answer
        if NUMBER.fullmatch(expected):
            # "$47.50", "47.5 dollars" and "1,200" are fine; an answer with several numbers is not.
            numbers = NUMBER.findall(text.replace(",", ""))
            if len(numbers) != 1 or len(numbers[0]) > MAX_NUMBER_DIGITS:
                return False
            return round(float(numbers[0]) * 100) == round(float(expected) * 100)
        return normalise(text) == normalise(expected)

    def _info(self, status):
        return {"turn": self._turn, "max_turns": self.max_turns, "status": status}
