"""Property-based tests of the one boundary every value from an environment crosses.

Arbitrary values, sizes and nestings (text with lone surrogates, integers of any size, NaN and
infinities, deep and wide lists and dicts, bytes that are not JSON at all) go through the protocol's
decoding, the contract checks, the validator, the rollout (through the default model's real tokenizer
and chat template) and the archive. Each must answer with a typed verdict, never raise in this
process, and leave the host running.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spade_rl.archive.store import Archive
from spade_rl.design.validate import REASONS, ValidationSettings, validate_source
from spade_rl.envs.contract import ContractViolation, check_reset_value, check_step_value
from spade_rl.policy import FakePolicy, default_tokenizer
from spade_rl.rollout import STOP_REASONS, EpisodeSpec, RolloutConfig, run_episodes
from spade_rl.sandbox import Sandbox, SandboxConfig, protocol

TEXT = st.text(st.characters(codec=None, categories=None), max_size=40)  # surrogates included
NUMBER = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
LEAF = st.one_of(TEXT, NUMBER)
VALUE = st.recursive(
    LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(TEXT, inner, max_size=6)),
    max_leaves=40,
)
FLAG = st.one_of(st.booleans(), VALUE)
INFO = st.one_of(st.dictionaries(TEXT, VALUE, max_size=3), VALUE)
STEP = st.tuples(st.one_of(TEXT, VALUE), st.one_of(NUMBER, VALUE), FLAG, FLAG, INFO)
RESET = st.one_of(st.tuples(TEXT, st.dictionaries(TEXT, VALUE, max_size=3)), VALUE)


def safe(value) -> None:
    """What the boundary promises of a decoded value."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")
        elif isinstance(item, int) and not isinstance(item, bool):
            assert -protocol.INT_BOUND <= item <= protocol.INT_BOUND
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, child in item.items():
                key.encode("utf-8")
                stack.append(child)
        else:
            assert item is None or isinstance(item, (bool, float)), type(item)


@given(VALUE)
@settings(max_examples=300, deadline=None)
def test_decoding_any_value_gives_a_safe_value_or_a_typed_refusal(value):
    try:
        decoded = protocol.decode(protocol.encode(value)[protocol.HEADER.size :])
    except ValueError:  # too deep, too many values, an integer out of bounds: all ValueError
        return
    safe(decoded)


@given(st.binary(max_size=200))
@settings(max_examples=300, deadline=None)
def test_decoding_any_bytes_raises_nothing_but_value_error(body):
    try:
        safe(protocol.decode(body))
    except ValueError:
        pass


@given(st.integers(min_value=0, max_value=5000), st.sampled_from(["[", '{"a":']))
@settings(max_examples=50, deadline=None)
def test_nesting_of_any_depth_is_refused_or_decoded(depth, opener):
    closer = "]" if opener == "[" else "}"
    body = (opener * depth + "0" + closer * depth).encode()
    try:
        decoded = protocol.decode(body)
    except ValueError:
        assert depth > protocol.MAX_DEPTH
        return
    assert depth <= protocol.MAX_DEPTH
    safe(decoded)


def test_value_count_is_bounded_before_decoding():
    body = ("[" + ",".join(["[]"] * 200_001) + "]").encode()
    with pytest.raises(protocol.TooManyValues):
        protocol.decode(body)
    assert protocol.count_bound(b'["a,b\\",c", 1, {"k": [2, 3]}]') == 8  # commas inside text do not count


@pytest.mark.slow
@given(RESET, STEP)
@settings(max_examples=300, deadline=None)
def test_contract_checks_answer_a_verdict(reset_value, step_value):
    for check, value in ((check_reset_value, reset_value), (check_step_value, step_value)):
        try:
            decoded = protocol.decode(protocol.encode(list(value) if isinstance(value, tuple) else value)[4:])
        except ValueError:
            continue
        try:
            check(decoded)
        except ContractViolation as exc:
            assert exc.reason and str(exc)


ECHO = """
class EchoValueEnv:
    def __init__(self, first=None, steps=(), max_turns=3):
        self.first, self.steps, self.turn = first, list(steps), 0
    def reset(self, seed=None):
        self.turn = 0
        return self.first
    def step(self, action):
        self.turn += 1
        return self.steps[(self.turn - 1) % len(self.steps)] if self.steps else None
    def solution(self):
        return "x"
"""


EXAMPLES = itertools.count()


@pytest.fixture(scope="module")
def pool():
    with Sandbox(SandboxConfig(pool_size=2, call_timeout_s=2.0, load_timeout_s=4.0)) as p:
        yield p


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    with Archive(tmp_path_factory.mktemp("boundary") / "archive.sqlite") as a:
        yield a


@pytest.fixture(scope="module")
def policy():
    return FakePolicy(lambda chat: "\\boxed{1}", tokenizer=default_tokenizer())


def as_json(value):
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.slow
@given(RESET, st.lists(STEP, min_size=1, max_size=3))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_validator_rollout_and_archive_never_raise(pool, archive, policy, reset_value, steps):
    kwargs = {"first": as_json(reset_value), "steps": [as_json(s) for s in steps]}
    report = validate_source(pool, ECHO, ValidationSettings(env_kwargs=kwargs, max_turns=3, trivial_seeds=2))
    assert report.reason in REASONS and report.valid == (report.reason == "ok"), report
    archive.add(
        ECHO + f"# example {next(EXAMPLES)}\n",
        valid=report.valid,
        reason=report.reason,
        message=report.message,
        skill="logic",
        setting="games",
        iteration=0,
        class_name=report.class_name,
    )
    [episode] = run_episodes(policy, pool, [EpisodeSpec(ECHO, env_kwargs=kwargs)], RolloutConfig(max_turns=3))
    assert episode.stop_reason in STOP_REASONS
    assert math.isfinite(episode.return_)
    for message in episode.messages:
        message["content"].encode("utf-8")
    if episode.messages:  # the conversation renders through the real chat template
        policy.render(episode.messages)
