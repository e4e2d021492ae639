"""Helpers of the GPU tests: what is present (CUDA, GPUs, vllm), skip markers, and ``vllm serve`` as a
subprocess on loopback (in development mode, with the weight-sync routes)."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
GPUS = torch.cuda.device_count() if HAS_CUDA else 0
HAS_VLLM = importlib.util.find_spec("vllm") is not None

needs_gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
needs_vllm = pytest.mark.skipif(
    not (HAS_CUDA and HAS_VLLM), reason="needs a CUDA GPU and vllm (the vllm extra)"
)
needs_two_gpus = pytest.mark.skipif(
    GPUS < 2, reason="needs two CUDA GPUs (NCCL refuses two ranks on one GPU)"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class VLLMServer:
    """``vllm serve`` in development mode (weight-sync routes) as a subprocess, on loopback."""

    def __init__(self, model: Path, log: Path, *, gpu: int = 0, weight_transfer: bool = True) -> None:
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", str(model),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--served-model-name", "gpu-test",
            "--gpu-memory-utilization", "0.25", "--max-model-len", "2048", "--enforce-eager",
            "--dtype", "bfloat16", "--logprobs-mode", "processed_logprobs",
        ]  # fmt: skip
        if weight_transfer:
            command += ["--weight-transfer-config", '{"backend": "nccl"}']
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "CUDA_VISIBLE_DEVICES": str(gpu)}
        env.setdefault("HF_HUB_OFFLINE", "1")
        self.log = log
        self._out = open(log, "w")
        self.process = subprocess.Popen(command, stdout=self._out, stderr=subprocess.STDOUT, env=env)

    def wait(self, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited ({self.process.returncode}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.root}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        raise TimeoutError(f"vllm serve did not come up in {timeout_s} s:\n{self.tail()}")

    def tail(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        self._out.close()
