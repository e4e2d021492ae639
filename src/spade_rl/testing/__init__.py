"""Test doubles, for the tests and for offline demos and benchmarks: not for production.

Nothing in the rest of ``spade_rl`` imports this package. What is here stands in for infrastructure a
CPU machine does not have:

- :mod:`spade_rl.testing.fake_vllm`: ``FakeVLLMServer``, an HTTP server on loopback that answers the
  vLLM routes this project uses with an in-process model, and ``LoopbackTransport``, the NCCL weight
  broadcast replaced by an in-process hand-over (``spade_rl.policy.weight_sync``'s tests);
- :mod:`spade_rl.testing.loopback_cluster`: ``LoopbackCluster``, a Ray cluster of several nodes on
  127.0.0.1 (needs the ``ray`` extra).

The scripted ``spade_rl.policy.FakePolicy`` is not here: ``spade-rl design --from-jsonl`` replays
recorded designer outputs with it, so it is part of the product.
"""
