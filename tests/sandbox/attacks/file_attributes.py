"""Attack: change a file the worker's uid owns (the test passes one; Landlock does not govern
modes, times or extended attributes): make it world-writable, set its times to 1970 and give it an
extended attribute, in ``__init__``. Stopped by seccomp's allow-list, which has no ``chmod``,
``utimensat`` or ``setxattr`` (nor ``chown``)."""

import os


class AttributesEnv:
    def __init__(self, max_turns=5, target="/tmp/spade-attack-default-attributes"):
        errors = []
        for change in (
            lambda: os.chmod(target, 0o777),
            lambda: os.utime(target, (0, 0)),
            lambda: os.setxattr(target, "user.spade", b"planted"),
        ):
            try:
                change()
            except OSError as exc:
                errors.append(exc)
        if errors:
            raise PermissionError(f"refused: {errors}")

    def reset(self, seed=None):
        return "Say anything.", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "anything"
