"""The sandbox worker: a process that hardens itself, then runs one environment source.

Started by :mod:`spade_rl.sandbox.pool` as ``python -I -c <bootstrap> <settings-json>``
(:func:`spade_rl.sandbox.launch.worker_command`). It keeps
the protocol pipes on private descriptors, points 0/1/2 at ``/dev/null``, imports the modules
environments may use, applies every layer (``hardening.harden``), reports them to the pool, and only
then reads requests. A worker is bound to the first source it loads; it may hold many instances of
that environment class (one per episode). Everything it sends is checked again by the pool: nothing
here is trusted once environment code has run, since that code shares this interpreter.

Requests: ``{"op": "load", "source"}``, ``{"op": "new", "instance", "kwargs"}``,
``{"op": "reset", "instance", "seed"}``, ``{"op": "step", "instance", "action"}``,
``{"op": "solution", "instance"}``, ``{"op": "close", "instance"}``, ``{"op": "ping"}``.
Answers: ``{"ok": true, "value", "output"}`` or ``{"ok": false, "kind", "reason", "type", "message",
"traceback", "output"}``, each with ``"clock"``: the clocks the call read (``spade_rl.sandbox.clock``:
environment code reads a virtual time, the same in validation and in play).
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import sys
import traceback

from spade_rl.envs.contract import ContractViolation
from spade_rl.envs.loader import load_env_class
from spade_rl.sandbox import protocol
from spade_rl.sandbox.clock import WorkerClock, install
from spade_rl.sandbox.hardening import harden, read_only_paths
from spade_rl.sandbox.view import ViewReport, make_view


class CappedOutput(io.TextIOBase):
    """Keeps the first ``limit`` characters printed during a call and drops the rest."""

    def __init__(self, limit: int):
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        text = str(text)
        room = self.limit - self.size
        if room > 0:
            kept = text[:room]
            self.parts.append(kept)
            self.size += len(kept)
        return len(text)

    def take(self) -> str:
        out = "".join(self.parts)
        self.parts.clear()
        self.size = 0
        return out


class Worker:
    def __init__(self, in_fd: int, out_fd: int, settings: dict):
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.max_bytes = settings["max_message_bytes"]
        self.spin_s = settings["spin_us"] / 1e6
        self.output = CappedOutput(settings["max_captured_output"])
        self.env_class: type | None = None
        self.source_hash = ""
        self.instances: dict[int, object] = {}
        self.clock = WorkerClock()

    # --- operations -----------------------------------------------------------------------------
    def op_load(self, request: dict) -> dict:
        source = request["source"]
        digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
        if self.env_class is not None:
            if digest != self.source_hash:
                raise RuntimeError("this worker is bound to another environment source")
            return {"class_name": self.env_class.__name__}
        self.env_class = load_env_class(source)
        self.source_hash = digest
        return {"class_name": self.env_class.__name__}

    def op_new(self, request: dict) -> None:
        if self.env_class is None:
            raise RuntimeError("no environment loaded")
        self.instances[request["instance"]] = self.env_class(**request.get("kwargs", {}))

    def op_reset(self, request: dict):
        return self._instance(request).reset(request.get("seed"))

    def op_step(self, request: dict):
        return self._instance(request).step(request["action"])

    def op_solution(self, request: dict):
        return self._instance(request).solution()

    def op_close(self, request: dict) -> None:
        env = self.instances.pop(request["instance"], None)
        close = getattr(env, "close", None)
        if callable(close):
            close()

    def op_ping(self, request: dict) -> str:
        return "pong"

    def _instance(self, request: dict):
        try:
            return self.instances[request["instance"]]
        except KeyError:
            raise RuntimeError(f"no environment instance {request['instance']!r}") from None

    # --- loop -----------------------------------------------------------------------------------
    def answer(self, request: dict) -> dict:
        handler = getattr(self, "op_" + str(request.get("op")), None)
        if handler is None:
            return {"ok": False, "kind": "protocol", "message": f"unknown op {request.get('op')!r}"}
        try:
            value = handler(request)
            return {"ok": True, "value": value}
        except ContractViolation as exc:
            if handler != self.op_load or type(exc) is not ContractViolation:
                return _exception(exc)  # the environment's own: never a reason code of the loader
            return {
                "ok": False,
                "kind": "contract",
                "reason": exc.reason,
                "type": "ContractViolation",
                "message": str(exc),
            }
        except MemoryError:
            return {"ok": False, "kind": "memory", "type": "MemoryError", "message": "out of memory"}
        except BaseException as exc:  # noqa: BLE001 - environment code may raise anything, SystemExit too
            return _exception(exc)

    def encode(self, response: dict) -> bytes:
        response["output"] = self.output.take()
        response["clock"] = self.clock.take()
        try:
            frame = protocol.encode(response)
        except MemoryError:
            frame = protocol.encode(
                {
                    "ok": False,
                    "kind": "memory",
                    "type": "MemoryError",
                    "id": response["id"],
                    "message": "out of memory while encoding the answer",
                }
            )
        except (TypeError, ValueError, RecursionError) as exc:
            frame = protocol.encode(
                {
                    "ok": False,
                    "kind": "unserializable",
                    "type": type(exc).__name__,
                    "id": response["id"],
                    "message": f"the value is not JSON: {_safe_str(exc)[:500]}",
                }
            )
        if len(frame) - protocol.HEADER.size > self.max_bytes:
            frame = protocol.encode(
                {
                    "ok": False,
                    "kind": "too_large",
                    "id": response["id"],
                    "message": f"answer of {len(frame)} bytes exceeds {self.max_bytes}",
                }
            )
        return frame

    def serve(self) -> None:
        # No depth check here: requests come from the pool, and the check would run builtins that
        # environment code may have replaced.
        reader = protocol.FrameReader(self.in_fd, max_bytes=1 << 30, max_depth=None)
        while True:
            try:
                request = reader.read(spin_s=self.spin_s)
            except protocol.PeerClosed:
                return
            response = self.answer(request)
            response["id"] = request.get("id")
            _write_all(self.out_fd, self.encode(response))


def _exception(exc: BaseException) -> dict:
    return {
        "ok": False,
        "kind": "exception",
        "type": _safe_name(exc),
        "message": _safe_str(exc)[:2000],
        "traceback": _format_tb(exc),
    }


def _safe_name(exc: BaseException) -> str:
    try:
        return str(type(exc).__name__)
    except Exception:  # noqa: BLE001 - a hostile metaclass
        return "BaseException"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a hostile __str__
        return f"<{type(exc).__name__} with an unprintable message>"


def _format_tb(exc: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(exc))[-4000:]
    except Exception:  # noqa: BLE001 - a hostile exception object
        return ""


def _view(settings: dict) -> ViewReport:
    if not settings.get("interpreter_view", True):
        return ViewReport(False, "off in the configuration")
    if settings["layers"].get("uid") == "off":
        return ViewReport(False, "not needed: the uid layer is off", not_needed=True)
    return make_view(read_only_paths(), settings["uid"], settings["gid"])


def main() -> None:
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    try:
        start(in_fd, out_fd, json.loads(sys.argv[1]))
    except Exception:  # noqa: BLE001 - a bug of ours while starting: tell the pool what it was
        protocol.write_frame(out_fd, {"ready": False, "error": traceback.format_exc()[-4000:], "layers": []})
        os._exit(4)


def start(in_fd: int, out_fd: int, settings: dict) -> None:
    sys.setrecursionlimit(settings["recursion_limit"])
    # First, while this process is still root and has one thread (a mount namespace needs both):
    # a read-only view of an interpreter that lies in a folder the dropped uid cannot enter.
    view = _view(settings)
    missing = []
    for name in settings["preload"]:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    reports = harden(settings)
    refused = [r.name for r in reports if settings["layers"][r.name] == "required" and not r.satisfied]
    worker = Worker(in_fd, out_fd, settings)
    sys.stdout = sys.stderr = worker.output
    protocol.write_frame(
        out_fd,
        {
            "ready": not refused,
            "pid": os.getpid(),
            "uid": os.getuid(),
            "layers": [r.to_json() for r in reports],
            "view": view.to_json(),
            "missing_preload": missing,
        },
    )
    if refused:
        os._exit(3)  # fail closed: never read code without every required layer
    install(worker.clock)  # from here on, code in this interpreter reads the virtual time
    worker.serve()
    os._exit(0)
