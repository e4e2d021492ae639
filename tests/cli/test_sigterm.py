"""``exit_on_sigterm``: SIGTERM inside the block ends it with ``SystemExit(143)`` after the block's own
cleanup, even when the handler ran where Python ignores exceptions (inside a finalizer)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from spade_rl.cli.common import exit_on_sigterm


@pytest.fixture
def restore_sigterm():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _sigterm_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.05)  # the handler runs here, between two bytecodes of this frame


class SignalledWhileCollected:
    def __del__(self) -> None:
        _sigterm_self()


def test_sigterm_in_the_block_exits_143_after_cleanup(restore_sigterm):
    closed = []
    with pytest.raises(SystemExit) as exit_:
        with exit_on_sigterm():
            try:
                _sigterm_self()
                pytest.fail("the handler did not end the block")
            finally:
                closed.append(True)
    assert exit_.value.code == 143 and closed == [True]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # a second SIGTERM cannot cut the cleanup


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigterm_swallowed_by_a_finalizer_still_exits_143(restore_sigterm):
    went_on = []
    with pytest.raises(SystemExit) as exit_:
        with exit_on_sigterm():
            doomed = SignalledWhileCollected()
            del doomed  # the handler's SystemExit is raised inside __del__, where Python ignores it
            went_on.append(True)
    assert went_on == [True]  # the block ran to its end, as the command did before the fix
    assert exit_.value.code == 143


def test_a_block_without_sigterm_restores_the_handler(restore_sigterm):
    before = signal.getsignal(signal.SIGTERM)
    with exit_on_sigterm():
        assert signal.getsignal(signal.SIGTERM) != before
    assert signal.getsignal(signal.SIGTERM) == before
