"""`spade-rl doctor --json`: the sandbox's layers and the hostile probes, as a user runs it."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_doctor_json_reports_layers_and_probes(spade):
    done = spade("doctor", "--json")
    report = json.loads(done.stdout)
    assert done.returncode == 0, report
    layers = {row["layer"]: row for row in report["layers"]}
    assert set(layers) == {"rlimits", "uid", "landlock", "seccomp", "bwrap"}
    for name in ("rlimits", "uid", "landlock", "seccomp"):
        assert layers[name]["active"], layers[name]
    assert report["healthy"] and len(report["probes"]) >= 8
    assert all(probe["stopped"] for probe in report["probes"])
