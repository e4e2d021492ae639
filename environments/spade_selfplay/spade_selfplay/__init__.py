"""The verifiers id ``spade-selfplay``: one SPADE round per episode (spade_rl.interop.verifiers.selfplay).

    vf-eval spade-selfplay -m MODEL --client.base-url URL --no-push --env.run-dir runs/verifiers

verifiers' loader takes the one Taskset, the one Env and the one Harness exported here; the harness
becomes every seat's default (an in-process chat call: nothing is fetched or executed)."""

from spade_rl.interop.verifiers.seats import InlineChatHarness
from spade_rl.interop.verifiers.selfplay import (
    SpadeSeedTaskset,
    SpadeSelfPlayConfig,
    SpadeSelfPlayEnv,
)

__all__ = ["InlineChatHarness", "SpadeSeedTaskset", "SpadeSelfPlayConfig", "SpadeSelfPlayEnv"]
