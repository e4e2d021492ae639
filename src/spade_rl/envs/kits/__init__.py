"""Design kits: the boilerplate of an environment, so that a design writes only what is its own.

A kit is a standard-library module shipped as source text beside this file (like the reference
environments, it is data: sent to the sandbox, never imported here). A design in a kit's form is a
subclass of the kit's base class; :func:`compose` puts the kit's source in front of it, so the
archive holds, and the sandbox runs, one self-contained module with exactly one ``*Env`` class (the
design's; the kit's base class does not end in ``Env``). :func:`design_part` takes the design back
out of a composed source (what the designer is shown as an example and what it wrote).

- ``question``: ``QuestionTask``, a one-question environment. The design writes
  ``make(self, rng) -> (question, answer)`` (``rng`` is the seeded ``random.Random``) and a class
  attribute ``hint``; the kit draws the instance from the seed, states the answer format, judges the
  last ``\\boxed{...}`` of an action (numbers compared as numbers, text ignoring case and spaces),
  counts turns (a turn with no answer is wasted; ``max_turns`` of them end the episode as truncated)
  and plays its own solution (the answer, boxed).
- ``tool_use``: ``ToolUseTask`` (also bound to ``ToolUseBaseEnv``, the SPADE reference's name, by an
  assignment: not a class statement, so the module still holds one ``*Env`` class), a tool-use
  environment. The design writes ``tools`` (name -> ``(description, {parameter: type})``), one
  ``tool_<name>`` method per tool, ``make(self, rng)`` returning ``(question, answer)`` or a list of
  ``(instruction, check)`` steps shown one at a time (BFCL-style progressive instructions), and
  ``plan(self)``, the tool calls that solve the instance; the kit writes the tools' OpenAI function
  schemas into the first observation (and into the reset info as ``tools``, for a chat template's
  native ``tools=``), parses ``<tool_call>`` blocks (JSON or Qwen3's ``<function=...>`` form),
  checks arguments against the schemas, runs the tools, judges ``<answer>...</answer>`` and plays
  ``plan()`` then the answer as its solution. Reset info of a stepped task lists the steps whose
  check raises on the initial state (``unevaluable_steps``: the reset gate of the validation reads it).

    >>> from spade_rl.envs import kits
    >>> source = kits.compose("question", kits.EXAMPLES["math"])
    >>> kits.design_part(source) == kits.EXAMPLES["math"].strip()
    True
"""

import functools
from importlib import resources

NAMES: tuple[str, ...] = ("question", "tool_use")
BASE_CLASSES: dict[str, str] = {"question": "QuestionTask", "tool_use": "ToolUseTask"}
# The names a design may subclass: the base class, and the reference's name for it.
BASE_NAMES: dict[str, tuple[str, ...]] = {
    "question": ("QuestionTask",),
    "tool_use": ("ToolUseTask", "ToolUseBaseEnv"),
}
DESIGN_MARKER = "# --- the design ---"  # the kit's last line: what follows is the design

# One short, correct design per game skill: the example a designer prompt shows when the archive has
# no design in this form yet.
EXAMPLES: dict[str, str] = {
    "math": """\
class ShelfBooksEnv(QuestionTask):
    def make(self, rng):
        shelves = rng.randint(2, 6)
        books = rng.randint(3, 9)
        question = f"A library has {shelves} shelves with {books} books on each. How many books are there?"
        return question, shelves * books

    hint = "Multiply the number of shelves by the number of books on each shelf."
""",
    "logic": """\
class TallestFriendEnv(QuestionTask):
    def make(self, rng):
        a, b, c = rng.sample(["Ana", "Ben", "Chen", "Dara", "Eli"], 3)
        facts = [f"{a} is taller than {b}.", f"{b} is taller than {c}."]
        rng.shuffle(facts)  # the answer is not always the first name: it must be worked out
        question = " ".join(facts) + " Who is the tallest?"
        return question, a

    hint = "Follow the chain of comparisons to the person that nobody is taller than."
""",
    "pattern": """\
class NextNumberEnv(QuestionTask):
    def make(self, rng):
        start = rng.randint(1, 9)
        step = rng.randint(2, 5)
        a, b, c = start, start + step, start + 2 * step
        question = f"What number comes next: {a}, {b}, {c}, ...?"
        return question, start + 3 * step

    hint = "Find the difference between neighbouring numbers and add it once more."
""",
    "spatial": """\
class RobotWalkEnv(QuestionTask):
    def make(self, rng):
        east = rng.randint(12, 40)
        west = rng.randint(2, east - 3)
        question = f"A robot walks {east} steps east, then {west} steps west. How far east is it now?"
        return question, east - west

    hint = "Steps west cancel steps east: subtract them."
""",
    "optimisation": """\
class CheapestFruitEnv(QuestionTask):
    def make(self, rng):
        apple, pear, plum = rng.sample(range(2, 10), 3)
        question = f"An apple costs {apple} dollars, a pear {pear}, a plum {plum}. Which fruit is cheapest?"
        prices = {"apple": apple, "pear": pear, "plum": plum}
        return question, min(prices, key=prices.get)

    hint = "Compare the three prices and name the fruit with the smallest one."
""",
    "causal": """\
class TankLevelEnv(QuestionTask):
    def make(self, rng):
        start = rng.randint(10, 20)
        inflow = rng.randint(3, 6)
        hours = rng.randint(2, 4)
        question = f"A tank of {start} litres gains {inflow} litres an hour. Litres after {hours} hours?"
        return question, start + inflow * hours

    hint = "Each hour adds the same amount: multiply it by the hours and add the start."
""",
}


# Short, correct tool-use designs (kit "tool_use"): a question answered from several tool results, and
# instructions given one at a time. A tool-use skill without its own example is shown the first one.
TOOL_EXAMPLES: dict[str, str] = {
    "banking": """\
class AccountTotalEnv(ToolUseTask):
    tools = {
        "list_accounts": ("List the ids of a customer's accounts.", {"customer": "string"}),
        "get_balance": ("Get the balance of an account in dollars.", {"account_id": "string"}),
        "get_rate": ("Get the yearly interest rate of a kind.", {"kind": {"enum": ["savings", "loan"]}}),
    }
    hint = "List the customer's accounts first, then look up every balance and add them."

    def make(self, rng):
        owners = rng.sample(["Ana", "Ben", "Chen", "Dara"], 2)
        ids = [f"A{n}" for n in rng.sample(range(100, 1000), 6)]
        self.accounts = {i: (owners[k % 2], rng.randint(20, 900)) for k, i in enumerate(ids)}
        self.customer = owners[0]
        total = sum(money for owner, money in self.accounts.values() if owner == self.customer)
        return f"What is the total balance, in dollars, of all accounts of {self.customer}?", total

    def tool_list_accounts(self, customer):
        return [i for i, (owner, _) in self.accounts.items() if owner == customer]

    def tool_get_balance(self, account_id):
        if account_id not in self.accounts:
            return "Error: no account " + account_id
        return self.accounts[account_id][1]

    def tool_get_rate(self, kind):
        return {"savings": 2.5, "loan": 6.0}[kind]

    def plan(self):
        mine = self.tool_list_accounts(self.customer)
        balances = [("get_balance", {"account_id": i}) for i in mine]  # a list: several calls in one turn
        return [("list_accounts", {"customer": self.customer}), balances]
""",
    "files": """\
class TidyInboxEnv(ToolUseTask):
    tools = {
        "list_files": ("List the files in a folder.", {"folder": "string"}),
        "make_folder": ("Create a folder.", {"folder": "string"}),
        "move_file": ("Move a file to a folder.", {"name": "string", "source": "string", "target": "string"}),
        "delete_file": ("Delete a file from a folder.", {"name": "string", "folder": "string"}),
    }
    hint = "List a folder before acting on it: the full file names are only known from the listing."

    def make(self, rng):
        kinds = rng.sample(["report", "notes", "budget", "photo", "draft"], 4)
        self.folders = {"inbox": [f"{kind}_{rng.randint(10, 99)}.txt" for kind in kinds]}
        self.file, self.target = rng.choice(self.folders["inbox"]), rng.choice(["archive", "old"])
        self.listed = ""
        kind, folder = self.file.split("_")[0], self.target
        return [
            ("Show me what is in the inbox folder.", lambda: self.listed == "inbox"),
            (f"Create a folder named {folder}.", lambda: folder in self.folders),
            (f"Move the {kind} file into {folder}.", lambda: self.file in self.folders.get(folder, [])),
        ]

    def tool_list_files(self, folder):
        self.listed = folder
        return self.folders.get(folder, "Error: no folder " + folder)

    def tool_make_folder(self, folder):
        self.folders.setdefault(folder, [])
        return "Created " + folder

    def tool_move_file(self, name, source, target):
        if name not in self.folders.get(source, []) or target not in self.folders:
            return "Error: no such file or folder"
        self.folders[source].remove(name)
        self.folders[target].append(name)
        return f"Moved {name} to {target}"

    def tool_delete_file(self, name, folder):
        if name not in self.folders.get(folder, []):
            return "Error: no such file"
        self.folders[folder].remove(name)
        return "Deleted " + name

    def plan(self):
        move = {"name": self.file, "source": "inbox", "target": self.target}
        listing, folder = ("list_files", {"folder": "inbox"}), ("make_folder", {"folder": self.target})
        return [listing, folder, ("move_file", move)]
""",
}


def tool_example(skill: str) -> str:
    """The built-in tool-use example a design for ``skill`` is shown."""
    return TOOL_EXAMPLES.get(skill, TOOL_EXAMPLES["banking"])


class UnknownKit(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


@functools.cache
def source(name: str) -> str:
    """The source text of kit ``name`` (read once)."""
    if name not in NAMES:
        raise UnknownKit(f"unknown design kit {name!r}; allowed: {', '.join(NAMES)}")
    return resources.files(__package__).joinpath(f"{name}.py").read_text(encoding="utf-8")


def compose(name: str, design: str) -> str:
    """One self-contained module: kit ``name``, then the design's code."""
    return source(name).rstrip() + "\n" + design.strip() + "\n"


def design_part(composed: str, kit: str | None = None) -> str | None:
    """The design's code in a source that :func:`compose` made (with kit ``kit``, when given), or
    ``None`` for any other source."""
    for name in NAMES if kit is None else (kit,):
        kit = source(name).rstrip()
        if composed.startswith(kit + "\n"):
            return composed[len(kit) + 1 :].strip()
    return None
