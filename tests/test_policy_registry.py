"""The policy registry names its factories by module path and imports a module only when a policy names it
(policies/registry.py): ``make_policy("fifo")`` must not pay for Gavel's scipy or Crius' plan search, and the
names it spells out must stay the modules' own."""

from __future__ import annotations

import json
import subprocess
import sys

from halyard.policies.dally import DALLY_OPTIONS
from halyard.policies.ordering import ORDERINGS
from halyard.policies.registry import AUGMENTATIONS, STAGES, SYNERGY_MECHANISMS, make_policy, policy_names
from halyard.policies.registry import DALLY_OPTIONS as REGISTERED_DALLY_OPTIONS
from halyard.policies.synergy import MECHANISMS

HEAVY = ("scipy", "numba", "pyarrow", "matplotlib", "halyard.policies.gavel", "halyard.policies.crius",
         "halyard.policies.synergy", "halyard.policies.synergy_opt", "halyard.policies.dally",
         "halyard.policies.easyscale", "halyard.policies.pollux", "halyard.policies.cassini")


def _imported_after(code: str) -> list[str]:
    """Which of :data:`HEAVY` a fresh interpreter has imported after running ``code``."""
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout.splitlines()[-1])


def test_the_registrys_names_are_the_modules_own():
    assert tuple(MECHANISMS) == SYNERGY_MECHANISMS
    assert REGISTERED_DALLY_OPTIONS == DALLY_OPTIONS
    assert set(DALLY_OPTIONS) <= set(AUGMENTATIONS)
    assert set(MECHANISMS) <= set(STAGES["placement"])
    assert {f"{m}:{o}" for m in MECHANISMS for o in ORDERINGS} <= set(policy_names())


def test_fifo_imports_no_other_policy_and_no_optional_package():
    assert _imported_after("from halyard.policies import make_policy; make_policy('fifo')") == []
    assert _imported_after("from halyard.policies import make_policy; make_policy('ordering=las,priority=first')") \
        == []


def test_a_policy_imports_its_own_module_when_named():
    assert "halyard.policies.gavel" in _imported_after("from halyard.policies import make_policy; make_policy('gavel')")
    assert "halyard.policies.crius" in _imported_after("from halyard.policies import make_policy; make_policy('crius')")


def test_every_preset_and_stage_builds_through_its_module_path():
    for name in policy_names():
        assert make_policy(name) is not None
    for registry in STAGES.values():
        for factory in registry.values():
            assert factory() is not None
