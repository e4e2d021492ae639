"""One request to a worker and its answer, judged: every field of what a worker sends is checked here.

A worker runs hostile code, so its answer is data to check, not to trust: ``judge`` lets out only the
pool's own reason codes and bounded text, ``read_failure`` turns a failed read into a result.
Whatever means the worker must be killed comes back as a ``Failure``, which the pool applies
(``Sandbox._fail``: kill the process group, count it, answer the call with its status).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from spade_rl.sandbox import protocol
from spade_rl.sandbox.results import LOADER_REASONS, CallResult, Status
from spade_rl.sandbox.worker_process import Worker, cpu_seconds, exit_text

IDLE_CHECK_S = 1.0  # how often (at most) a worker's CPU time is checked, when it is sent a call
IDLE_CPU_SHARE = 0.25  # the share of its idle time a worker may spend on the CPU (an honest one: 0)
IDLE_CPU_GRACE_S = 0.1  # plus this much: clock ticks, the end of an answer, the start of a read


@dataclass(frozen=True)
class Failure:
    """The worker must be killed; its call answers with this status, reason code and message."""

    status: Status
    reason: str
    error: str = ""


def idle_failure(worker: Worker, now: float, spin_s: float) -> Failure | None:
    """A failure when the worker used CPU between calls: at most once a second per worker, its CPU
    time since the last check, less the wall time of its calls and their short spins (``spin_s``
    each), must stay under ``IDLE_CPU_SHARE`` of the idle time (plus a little). An honest worker
    sleeps between calls; timers and threads are denied, so one that computes then has rewritten its
    own loop. (Not under bubblewrap: the worker is in another pid namespace; the pool skips it.)"""
    if now - worker.checked_at < IDLE_CHECK_S:
        return None
    cpu = cpu_seconds(worker.proc.pid)
    if cpu is None:
        return None
    first = worker.checked_at == 0.0
    idle = now - worker.checked_at - worker.busy_s
    used = cpu - worker.cpu_at - worker.busy_s - worker.calls * spin_s
    worker.cpu_at, worker.checked_at, worker.busy_s, worker.calls = cpu, now, 0.0, 0
    if first or used <= IDLE_CPU_GRACE_S + IDLE_CPU_SHARE * idle:
        return None
    return Failure(
        Status.PROTOCOL_ERROR,
        "protocol_error",
        f"the worker used {used:.2f} s of CPU between calls, in {idle:.2f} s without a request: "
        "a worker computes only while it answers",
    )


def send(worker: Worker, request: dict, deadline: float) -> Failure | None:
    """Write a request; a failure when the worker is gone or stopped reading in time."""
    try:
        protocol.write_frame(worker.to_fd, request, deadline)
    except protocol.Deadline:
        return Failure(Status.TIMEOUT, "timeout", "the worker stopped reading requests")
    except OSError:
        return Failure(Status.CRASHED, "crashed", exit_text(worker))
    return None


def read_failure(
    worker: Worker, op: str, start: float, deadline: float, exc: Exception
) -> CallResult | Failure:
    """The result of a failed read: the worker is killed, whatever went wrong, except for a whole
    frame with a value the protocol does not carry (the stream is intact: the worker is only tainted)."""
    if isinstance(exc, protocol.Deadline):
        return Failure(Status.TIMEOUT, "timeout", f"{op} did not answer within {deadline - start:.3g} s")
    if isinstance(exc, (protocol.PeerClosed, OSError)):
        return Failure(Status.CRASHED, "crashed", exit_text(worker))
    if isinstance(exc, protocol.FrameTooLarge):  # TooManyValues too
        return Failure(Status.OUTPUT_TOO_LARGE, "output_too_large", str(exc))
    if isinstance(exc, protocol.ValueOutOfBounds):  # a whole frame was read: the stream is intact
        worker.tainted = True
        return CallResult(
            Status.EXCEPTION,
            None,
            "unserializable",
            f"the value is outside what the protocol carries: {exc}",
            "ValueOutOfBounds",
            elapsed_s=time.monotonic() - start,
        )
    if isinstance(exc, (ValueError, RecursionError, MemoryError)):
        return Failure(Status.PROTOCOL_ERROR, "protocol_error", f"not JSON: {exc}")
    raise exc  # a bug of ours, not something the worker did


def judge(
    worker: Worker, op: str, rid: int, start: float, answer: Any, max_output: int
) -> CallResult | Failure:
    """The result of a decoded answer to request ``rid``, every field checked: only the pool's own
    reason codes and bounded text (printed output cut at ``max_output``) come out."""
    elapsed = time.monotonic() - start
    worker.busy_s += elapsed
    worker.calls += 1
    if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool) or answer.get("id") != rid:
        return Failure(
            Status.PROTOCOL_ERROR, "protocol_error", "the answer is not a well-formed reply to this request"
        )
    if worker.reader.pending:
        return Failure(Status.PROTOCOL_ERROR, "protocol_error", "the worker sent more than one answer")
    # The worker caps printed output, but it runs hostile code: cap again here.
    output = answer.get("output") if isinstance(answer.get("output"), str) else ""
    output = output[:max_output]
    clock = clock_reads(answer.get("clock"))
    if answer["ok"]:
        return CallResult(
            Status.OK, answer.get("value"), "ok", output=output, elapsed_s=elapsed, clock_reads=clock
        )
    kind = answer.get("kind")
    message = str(answer.get("message", ""))[:4000]
    if kind == "memory":
        return Failure(Status.MEMORY, "memory", message)
    if kind == "too_large":
        return Failure(Status.OUTPUT_TOO_LARGE, "output_too_large", message)
    if kind not in ("exception", "contract", "unserializable"):
        return Failure(Status.PROTOCOL_ERROR, "protocol_error", f"unknown kind {kind!r}")
    worker.tainted = True
    # Only the loader's own codes pass as they are: environment code shares the worker's
    # interpreter and can raise a ContractViolation of its own with any reason it likes.
    reason = answer.get("reason") if kind == "contract" else kind
    if kind == "contract" and (op != "load" or reason not in LOADER_REASONS):
        reason = "exception"
    return CallResult(
        Status.EXCEPTION,
        None,
        reason,
        message,
        str(answer.get("type", ""))[:128],
        str(answer.get("traceback", ""))[:4000],
        output,
        elapsed,
        clock,
    )


def clock_reads(value: Any) -> tuple[str, ...]:
    """The names of the clocks a worker says a call read, checked: at most 16 names of at most 64
    characters (a worker runs hostile code: anything else is kept as one name that says so)."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list) or len(value) > 16 or not all(isinstance(n, str) for n in value):
        return ("<an unreadable list of clocks>",)
    return tuple(name[:64] for name in value)
