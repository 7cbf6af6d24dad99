"""Every preset decides what it decided when the pin was written (benchmarks/pin_schedules.py says
how to re-pin on purpose). Refactors of the policy contract and speed-ups must keep it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from pin_schedules import PIN_FILE, digest, pinned_policies

PINNED = json.loads(PIN_FILE.read_text(encoding="utf-8"))


@pytest.mark.parametrize("policy", sorted(PINNED))
def test_the_schedule_on_the_bundled_trace_is_the_pinned_one(policy):
    assert digest(policy) == PINNED[policy], f"{policy}'s event log changed; re-pin only on purpose"


def test_every_preset_is_pinned():
    assert set(pinned_policies()) <= set(PINNED), "pin new presets: benchmarks/pin_schedules.py --write"
