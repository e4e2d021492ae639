"""GEM and TextArena games played in spade-rl: their catalogues and sources (no package needed), and,
where the packages are installed, the games themselves in the sandbox: validated by the battery,
played by run_episodes with scripted policies to known outcomes, and seeded into a run's pool.

The packages are never imported here: their code runs only in sandbox workers that preload them.
"""

from __future__ import annotations

import re

import pytest

from spade_rl.archive import Archive
from spade_rl.design.validate import ValidationSettings, validate_source
from spade_rl.envs import external
from spade_rl.envs.loader import find_env_classes
from spade_rl.loop.config import ConfigError, PoolConfig, load_config
from spade_rl.loop.pool import seed_pool
from spade_rl.policy import FakePolicy
from spade_rl.rollout import EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import Sandbox, SandboxConfig

needs_gem = pytest.mark.skipif(not external.installed("gem"), reason=external.INSTALL["gem"])
needs_textarena = pytest.mark.skipif(
    not external.installed("textarena"), reason=external.INSTALL["textarena"]
)
PACKAGES = [p for p in external.PACKAGES if external.installed(p)]


@pytest.fixture(scope="module")
def games_sandbox():
    """Two workers that preload whichever of gem and textarena is installed."""
    with Sandbox(external.external_sandbox_config(SandboxConfig(pool_size=2), PACKAGES)) as sandbox:
        yield sandbox


# --- catalogues and sources: plain data, no package needed -----------------------------------------------
@pytest.mark.parametrize(
    ("package", "make"), [("gem", external.gem_source), ("textarena", external.textarena_source)]
)
def test_every_catalogued_game_has_a_source_with_exactly_one_env_class(package, make):
    for game_id in external.CATALOGUES[package]:
        source = make(game_id, {"x": 1})
        assert find_env_classes(source) == [external.class_name(package, game_id)]
        assert repr(game_id) in source and "'{\"x\": 1}'" in source
    assert set(external.DEFAULT_EVAL_GAMES[package]) <= set(external.CATALOGUES[package])


def test_unknown_games_and_bad_arguments_are_refused_with_what_is_allowed():
    with pytest.raises(ValueError, match=r"unknown gem game 'game:Chess'; allowed: game:GuessTheNumber"):
        external.gem_source("game:Chess")
    with pytest.raises(ValueError, match=r"unknown textarena game.*Chess-v0.*allowed: GuessTheNumber-v0"):
        external.check_games("textarena", ["Chess-v0"], for_pool=False, key="option textarena.games")
    with pytest.raises(ValueError, match=r"no reference solution.*games that can: game:GuessTheNumber"):
        external.check_games("gem", ["game:Game2048-v0-easy"], for_pool=True, key="pool.gem")
    with pytest.raises(ValueError, match=r"pool.gem_kwargs.game:Sudoku-v0-easy: not one of the games"):
        external.check_games(
            "gem", ["game:Mastermind-v0-easy"], {"game:Sudoku-v0-easy": {}}, for_pool=True, key="pool.gem"
        )
    with pytest.raises(ValueError, match="named twice"):
        external.check_games("gem", ["game:Sudoku-v0-easy"] * 2, for_pool=False, key="pool.gem")


def test_pool_config_refuses_what_cannot_be_a_training_game():
    with pytest.raises(ConfigError, match=r"pool.gem: unknown gem game"):
        PoolConfig(reference=(), gem=("game:Nope",))
    with pytest.raises(ConfigError, match=r"pool.textarena: .*LightsOut-v0.*no reference solution"):
        PoolConfig(reference=(), textarena=("LightsOut-v0",))
    with pytest.raises(ConfigError, match="reasoning_gym_attempts must be at least 1"):
        PoolConfig(reasoning_gym_attempts=0)
    assert PoolConfig(reference=()).packages == () and PoolConfig(reference=()).empty


@pytest.mark.skipif(len(PACKAGES) < 2, reason="needs both gem and textarena")
def test_a_run_configuration_names_games_and_their_arguments(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        'profile = "cpu"\n[pool]\nreference = []\ngem = ["game:GuessTheNumber-v0-hard"]\n'
        'textarena = ["TowerOfHanoi-v0"]\n'
        'reasoning_gym_attempts = 3\n[pool.gem_kwargs]\n"game:GuessTheNumber-v0-hard" = {max_number = 30}\n'
    )
    pool = load_config(path).pool
    assert pool.gem == ("game:GuessTheNumber-v0-hard",) and pool.textarena == ("TowerOfHanoi-v0",)
    assert pool.gem_kwargs == {"game:GuessTheNumber-v0-hard": {"max_number": 30}}
    assert pool.packages == ("gem", "textarena") and pool.reasoning_gym_attempts == 3 and not pool.empty


def test_the_sandbox_configuration_adds_each_preload_once():
    base = SandboxConfig()
    config = external.external_sandbox_config(base, ["gem", "textarena"])
    assert config.preload[-2:] == (external.PRELOAD["gem"], external.PRELOAD["textarena"])
    assert external.external_sandbox_config(config, ["gem"]) == config
    assert external.external_sandbox_config(base, []) is base and config.start_timeout_s >= 60


# --- in the sandbox, with the packages' own code --------------------------------------------------------
SOLVABLE = [
    ("gem", external.gem_source, "game:GuessTheNumber-v0-hard"),
    ("gem", external.gem_source, "game:Mastermind-v0-easy"),
    ("gem", external.gem_source, "game:TowerofHanoi-v0-easy"),
    ("gem", external.gem_source, "game:Sudoku-v0-easy"),
    ("textarena", external.textarena_source, "GuessTheNumber-v0"),
    ("textarena", external.textarena_source, "Mastermind-v0"),
    ("textarena", external.textarena_source, "TowerOfHanoi-v0"),
    ("textarena", external.textarena_source, "FrozenLake-v0"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("package", "make", "game_id"), SOLVABLE)
def test_solvable_games_pass_the_validation_battery(games_sandbox, package, make, game_id):
    if not external.installed(package):
        pytest.skip(external.INSTALL[package])
    settings = ValidationSettings(
        max_turns=25, extra_imports=external.needed_imports(package), total_timeout_s=90
    )
    report = validate_source(games_sandbox, make(game_id), settings)
    assert report.valid, f"{report.reason}: {report.message}"


def test_a_game_needs_its_imports_allowed(games_sandbox):
    report = validate_source(games_sandbox, external.gem_source("game:Sudoku-v0-easy"), ValidationSettings())
    assert report.reason == "disallowed_import" and "gem" in report.message


def binary_search(chat: list[dict]) -> str:
    """GEM's Guess The Number by halving: reads the range and every higher/lower answer from the chat."""
    text = chat[-1]["content"]
    low, high = (int(n) for n in re.search(r"between (\d+) and (\d+)", text).groups())
    for guess, direction in re.findall(r"you guessed (\d+), and the target number is (higher|lower)", text):
        if direction == "higher":
            low = max(low, int(guess) + 1)
        else:
            high = min(high, int(guess) - 1)
    return f"I guess \\boxed{{{(low + high) // 2}}}"


@needs_gem
def test_gem_guess_the_number_is_won_by_halving_and_lost_by_garbage(games_sandbox, tokenizer):
    source = external.gem_source("game:GuessTheNumber-v0-hard")  # 1..50 in 7 turns: halving always wins
    config = RolloutConfig(max_turns=10, max_new_tokens=16, max_context_tokens=4096)
    specs = [EpisodeSpec(source, seed=seed) for seed in range(4)]
    won = run_episodes(FakePolicy(binary_search, tokenizer=tokenizer), games_sandbox, specs, config)
    assert [e.won for e in won] == [True] * 4 and [e.return_ for e in won] == [1.0] * 4
    assert all(e.stop_reason == "terminated" and len(e.turns) <= 6 for e in won)
    assert "Congratulations" in won[0].turns[-1].observation
    assert "between 1 and 50" in won[0].messages[1]["content"]  # GEM's instructions reach the agent
    lost = run_episodes(
        FakePolicy(lambda chat: "no idea", tokenizer=tokenizer), games_sandbox, specs[:2], config
    )
    # GEM ends the game at an action it cannot parse (its reward -0.1): lost, return 0, no error.
    assert [(e.won, e.return_, e.stop_reason, len(e.turns)) for e in lost] == [
        (False, 0.0, "terminated", 1)
    ] * 2


@needs_gem
def test_gem_mastermind_pays_partial_pegs_but_only_a_solved_code_wins(games_sandbox):
    opened = games_sandbox.open(external.gem_source("game:Mastermind-v0-easy"))  # 2 of 6, 10 turns
    env = opened.value
    try:
        env.reset(seed=3)
        [code] = env.solution().value
        first, second = re.search(r"\\boxed\{(\d) (\d)\}", code).groups()
        wrong = next(str(n) for n in range(1, 7) if str(n) not in (first, second))
        half = env.step(f"\\boxed{{{first} {wrong}}}").value  # one black peg: GEM pays 0.5
        assert half[1:4] == [0.0, False, False] and half[4]["gem_reward"] == 0.5
        done = env.step(code).value
        assert done[1:4] == [1.0, True, False] and done[4]["status"] == "won" and done[4]["gem_return"] == 1.0
    finally:
        env.close()


@pytest.mark.slow
@needs_gem
def test_interleaved_instances_draw_what_they_draw_alone(games_sandbox):
    """2048 places a random tile after every move: each instance keeps its own RNG state."""
    source = external.gem_source("game:Game2048-v0-easy")
    moves = ["\\boxed{left}", "\\boxed{up}", "\\boxed{right}", "\\boxed{down}"] * 2

    def alone(seed):
        env = games_sandbox.open(source).value
        try:
            return [env.reset(seed=seed).value[0]] + [env.step(m).value[0] for m in moves]
        finally:
            env.close()

    a, b = games_sandbox.open(source).value, games_sandbox.open(source).value
    try:
        seen_a, seen_b = [a.reset(seed=1).value[0]], [b.reset(seed=2).value[0]]
        for move in moves:
            seen_a.append(a.step(move).value[0])
            seen_b.append(b.step(move).value[0])
    finally:
        a.close()
        b.close()
    assert seen_a == alone(1) and seen_b == alone(2) and seen_a != seen_b


@needs_textarena
def test_textarena_tower_of_hanoi_is_won_with_boxed_moves(games_sandbox, tokenizer):
    source = external.textarena_source("TowerOfHanoi-v0")  # 3 disks, 14 turns
    solution = ["A C", "A B", "C B", "A C", "B A", "B C", "A C"]
    config = RolloutConfig(max_turns=14, max_new_tokens=16, max_context_tokens=4096)
    script = [f"\\boxed{{{move}}}" for move in solution]
    [episode] = run_episodes(
        FakePolicy(script, tokenizer=tokenizer), games_sandbox, [EpisodeSpec(source)], config
    )
    assert (episode.won, episode.return_, len(episode.turns)) == (True, 1.0, 7)
    assert "[A C]" in episode.messages[1]["content"] or "Tower of Hanoi" in episode.messages[1]["content"]
    assert "C: [3, 2, 1]" in episode.turns[-1].observation


@needs_textarena
def test_textarena_ends_a_game_after_two_invalid_moves_in_a_row(games_sandbox, tokenizer):
    source = external.textarena_source("GuessTheNumber-v0")
    config = RolloutConfig(max_turns=10, max_new_tokens=16, max_context_tokens=4096)
    [episode] = run_episodes(
        FakePolicy(lambda c: "hmm", tokenizer=tokenizer), games_sandbox, [EpisodeSpec(source)], config
    )
    # The first invalid move is a warning (TextArena's error allowance), the second ends the game.
    assert (episode.won, episode.return_, episode.stop_reason, len(episode.turns)) == (
        False,
        0.0,
        "terminated",
        2,
    )
    assert "invalid move" in episode.turns[0].observation.lower()


def halving(chat: list[dict]) -> str:
    """TextArena's Guess The Number by halving, answering only what follows a forced ``\\boxed{``:
    reads the range, the answer line's example and every higher/lower answer from the prompt."""
    text = chat[-1]["content"]
    assert "Give your move inside \\boxed{}: for example \\boxed{5}, which the game reads as [5]." in text
    low, high = (int(n) for n in re.search(r"between (\d+) and (\d+)", text).groups())
    guesses = [int(g) for g in re.findall(r"assistant\n\\boxed\{(\d+)\}", text)]
    answers = re.findall(r"The target number is (higher|lower)", text)
    for guess, direction in zip(guesses, answers, strict=True):
        if direction == "higher":
            low = max(low, guess + 1)
        else:
            high = min(high, guess - 1)
    return f"{(low + high) // 2}}} and more text that the stop string cuts"


BOXED_TURNS = {"action_prefix": {"games": "\\boxed{"}, "action_stop": {"games": ["}"]}}


@needs_textarena
def test_textarena_guess_the_number_is_won_through_boxed_answers_after_the_forced_opening(
    games_sandbox, tokenizer
):
    source = external.textarena_source("GuessTheNumber-v0")  # 1..20 in 10 turns: halving always wins
    config = RolloutConfig(max_turns=10, max_new_tokens=16, max_context_tokens=4096, **BOXED_TURNS)
    specs = [EpisodeSpec(source, seed=seed) for seed in range(3)]
    episodes = run_episodes(FakePolicy(halving, tokenizer=tokenizer), games_sandbox, specs, config)
    assert [(e.won, e.return_, e.stop_reason) for e in episodes] == [(True, 1.0, "terminated")] * 3
    assert all(re.fullmatch(r"\\boxed\{\d+\}", turn.action) for e in episodes for turn in e.turns)


@needs_textarena
def test_textarena_takes_the_last_boxed_answer_whatever_else_the_turn_holds(games_sandbox):
    env = games_sandbox.open(external.textarena_source("TowerOfHanoi-v0")).value
    try:
        first = env.reset(seed=0).value[0]
        assert first.endswith("for example \\boxed{A C}, which the game reads as [A C].")
        # A bracket in the reasoning is not the move: the boxed one is (before, TextArena read [maybe]).
        moved = env.step("I could try [maybe] but \\boxed{A C}").value[0]
        assert "C: [1]" in moved and "invalid" not in moved.lower()
        again = env.step("\\boxed{[A B]}").value[0]  # a boxed move already in brackets
        assert "B: [2]" in again and "invalid" not in again.lower()
    finally:
        env.close()


@needs_gem
def test_gem_is_given_the_last_boxed_answer_in_its_own_strict_form(games_sandbox, tokenizer):
    """GEM ends Guess The Number at a guess its pattern \\boxed{(\\d+)} misses: a spaced or bracketed
    boxed answer is given to it as \\boxed{N}."""
    source = external.gem_source("game:GuessTheNumber-v0-hard")

    def spaced(chat):
        return binary_search(chat).replace("\\boxed{", "\\boxed{ [").replace("}", "] }")

    config = RolloutConfig(max_turns=10, max_new_tokens=16, max_context_tokens=4096)
    specs = [EpisodeSpec(source, seed=seed) for seed in range(2)]
    episodes = run_episodes(FakePolicy(spaced, tokenizer=tokenizer), games_sandbox, specs, config)
    assert [(e.won, e.return_) for e in episodes] == [(True, 1.0)] * 2
    assert all("\\boxed{ [" in turn.action for e in episodes for turn in e.turns)


@pytest.mark.slow
@pytest.mark.skipif(len(PACKAGES) < 2, reason="needs both gem and textarena")
def test_the_pool_seeds_gem_and_textarena_games_validated_in_the_sandbox(games_sandbox, tmp_path):
    config = PoolConfig(
        reference=(),
        gem=("game:GuessTheNumber-v0-hard", "game:Mastermind-v0-easy"),
        gem_kwargs={"game:Mastermind-v0-easy": {"num_numbers": 5}},
        textarena=("TowerOfHanoi-v0",),
    )
    assert config.packages == ("gem", "textarena")
    with Archive(tmp_path / "archive.sqlite") as archive:
        added = seed_pool(archive, games_sandbox, config, ValidationSettings(max_turns=16))
        assert added == 3
        records = [archive.get(i) for i in archive.ids()]
        assert all(r.valid for r in records), [(r.skill, r.reason, r.message) for r in records]
        assert sorted(r.skill for r in records) == [
            "gem:game:GuessTheNumber-v0-hard",
            "gem:game:Mastermind-v0-easy",
            "textarena:TowerOfHanoi-v0",
        ]
        mastermind = next(r for r in records if r.skill == "gem:game:Mastermind-v0-easy")
        assert '{"num_numbers": 5}' in mastermind.source and mastermind.env_kwargs == {"max_turns": 16}
        assert seed_pool(archive, games_sandbox, config, ValidationSettings(max_turns=16)) == 0  # resume


@needs_gem
def test_a_worker_without_the_preload_says_what_to_add(sandbox):
    opened = sandbox.open(external.gem_source("game:GuessTheNumber-v0-easy"))  # the default preload
    assert not opened.ok and opened.reason == "load_raised"
    assert "must preload spade_rl.envs.external.gem_preload" in opened.traceback


@needs_gem
def test_the_run_s_turn_limit_lowers_gem_s_budget_and_the_instructions_say_so(games_sandbox):
    source = external.gem_source("game:Mastermind-v0-easy")  # GEM gives it 10 turns
    for given, stated in ((4, 4), (50, 10)):  # lowered, never raised
        env = games_sandbox.open(source, {"max_turns": given}).value
        try:
            assert f"code within {stated} turns" in env.reset(seed=0).value[0]
            results = [env.step("\\boxed{9 9}").value for _ in range(stated)]  # out of range: no peg
        finally:
            env.close()
        assert [r[2:4] for r in results[:-1]] == [[False, False]] * (stated - 1)
        assert results[-1][1:4] == [0.0, False, True] and results[-1][4]["status"] == "out_of_turns"
