"""The import rules between Halyard's packages, written once and checked on every import statement.

The layers and why they point one way are in docs/architecture.md ("Layers") and docs/design-rules.md;
this module is where the rules themselves live (:data:`RULES`, :data:`AGENT_COMMAND`). The check reads
the source with :mod:`ast` -- every ``import`` and ``from ... import`` of every module, those inside
functions and under ``if TYPE_CHECKING:`` included, since a lazy or typing-only import is a dependency
all the same -- so it needs nothing installed and runs in well under a second.

A rule of a package that does not exist yet (``halyard.scheduling`` before the pure core is moved out
of ``controlplane/``) checks nothing. An import that breaks a rule today and is known is listed in
:data:`KNOWN`, with the date it was listed and why; an entry whose import is gone fails the test, so the
list only shrinks.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Rule:
    """Modules of ``package`` import no module under any of ``forbidden`` (or may import only ``only``)."""

    package: str
    why: str
    forbidden: tuple[str, ...] = ()
    only: tuple[str, ...] | None = None  # halyard modules allowed (prefixes); None: all but ``forbidden``


DAEMON = ("halyard.controlplane", "halyard.agent", "halyard.v1", "halyard.wire", "grpc", "aiohttp")

# The rules (docs/architecture.md, "Layers"). Prefixes: "halyard.agent" covers halyard.agent.*.
RULES: tuple[Rule, ...] = (
    Rule("halyard.datamodel", "the shared vocabulary sits below every subsystem",
         forbidden=("halyard.traces", "halyard.emulator", "halyard.policies", "halyard.scheduling",
                    "halyard.parallelism", *DAEMON)),
    Rule("halyard.traces", "trace loaders import nothing but the shared data model",
         only=("halyard.traces", "halyard.datamodel", "halyard.data")),
    Rule("halyard.parallelism", "the plan helpers policies and the emulator share sit below both",
         only=("halyard.parallelism", "halyard.datamodel")),
    Rule("halyard.emulator", "the one performance model is called by the simulator and the agents alike",
         forbidden=("halyard.policies", "halyard.scheduling", *DAEMON)),
    Rule("halyard.policies", "pure decision code: a read-only view in, a plan out; no sockets, clocks or store",
         forbidden=("halyard.emulator", "halyard.scheduling", "halyard.traces", *DAEMON)),
    Rule("halyard.scheduling", "the pure core runs in-process (simulate) and under the daemon (replay) alike",
         forbidden=(*DAEMON, "asyncio", "sqlite3", "psycopg", "prometheus_client", "google.protobuf")),
    Rule("halyard.agent", "an agent speaks the protocol; it holds nothing of the control plane",
         forbidden=("halyard.controlplane", "halyard.scheduling", "halyard.policies")),
    Rule("halyard.controlplane", "the daemon speaks to agents over the protocol only; the replay driver that "
         "starts both lives in halyard.experiments", forbidden=("halyard.agent",)),
)

# The agent's command (`halyard agent`) loads nothing of the control plane: followed through every halyard
# module it imports, at any depth (docs/operations.md measures its start-up).
AGENT_COMMAND = ("halyard.cli.agent", ("halyard.controlplane", "halyard.scheduling", "halyard.policies"))

# Known breaks of a rule: (importing module, imported module) -> "date: why, and what removes it".
KNOWN: dict[tuple[str, str], str] = {}


@cache
def packages() -> dict[str, Path]:
    """Package name -> folder, from pyproject.toml's package-dir (the installed layout, whatever the cwd)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {name: ROOT / folder for name, folder in config["package-dir"].items()}
    return {name: dirs.get(name, dirs["halyard"] / Path(*name.split(".")[1:])) for name in config["packages"]}


@cache
def modules() -> dict[str, Path]:
    """Every halyard module -> its file (generated protocol code excluded: it imports only protobuf)."""
    out: dict[str, Path] = {}
    for name, folder in packages().items():
        if name == "halyard.v1":
            continue
        for path in sorted(folder.glob("*.py")):
            out[name if path.stem == "__init__" else f"{name}.{path.stem}"] = path
    return out


@cache
def imports(module: str) -> tuple[str, ...]:
    """Every module ``module`` imports (``from a import b`` counts as ``a.b`` when ``b`` is a module)."""
    path = modules()[module]
    here = module if path.stem == "__init__" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.append(base)
            found += [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules()]
    return tuple(dict.fromkeys(found))


def under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def breaks(rule: Rule) -> list[tuple[str, str]]:
    out = []
    for module in modules():
        if not under(module, (rule.package,)):
            continue
        for target in imports(module):
            if rule.only is not None:
                if target.startswith("halyard") and not under(target, rule.only):
                    out.append((module, target))
            elif under(target, rule.forbidden):
                out.append((module, target))
    return out


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.package)
def test_each_package_imports_only_what_its_layer_allows(rule: Rule) -> None:
    found = [b for b in breaks(rule) if b not in KNOWN]
    assert not found, f"{rule.package}: {rule.why}; these imports break the rule (docs/architecture.md):\n" + \
        "\n".join(f"  {m} imports {t}" for m, t in found)


def test_the_agent_command_loads_nothing_of_the_control_plane() -> None:
    start, forbidden = AGENT_COMMAND
    seen, todo, via = {start}, [start], {start: start}
    while todo:
        module = todo.pop()
        for target in imports(module):
            # importing a.b.c runs a/__init__ and a/b/__init__ first
            parts = target.split(".")
            for i in range(2, len(parts) + 1):
                name = ".".join(parts[:i])
                if name in modules() and name not in seen:
                    seen.add(name)
                    via[name] = module
                    todo.append(name)
    reached = sorted(m for m in seen if under(m, forbidden))

    def chain(m: str) -> str:
        path = [m]
        while path[-1] != start:
            path.append(via[path[-1]])
        return " <- ".join(path)

    assert not reached, "the agent's command imports the control plane:\n" + "\n".join(map(chain, reached))


def test_every_known_break_still_exists() -> None:
    """A fixed import leaves the list: an entry whose import is gone (or breaks no rule) fails here."""
    live = {b for rule in RULES for b in breaks(rule)}
    gone = sorted(set(KNOWN) - live)
    assert not gone, f"remove these entries of KNOWN, their imports are fixed: {gone}"


def test_the_check_sees_a_break(tmp_path: Path) -> None:
    """The check can fail: a policy module that imports the control plane is reported."""
    source = "from halyard.controlplane.service import ControlPlane\n\ndef f():\n    import grpc\n"
    path = tmp_path / "bad.py"
    path.write_text(source)
    modules()["halyard.policies._layering_probe"] = path
    try:
        rule = next(r for r in RULES if r.package == "halyard.policies")
        assert {t for m, t in breaks(rule) if m == "halyard.policies._layering_probe"} == {
            "halyard.controlplane.service", "grpc"}
    finally:
        del modules()["halyard.policies._layering_probe"]
        imports.cache_clear()


def test_every_rule_names_a_package_or_one_to_come() -> None:
    """A rule over a misspelt package would check nothing; only halyard.scheduling may not exist yet
    (move_core.sh creates it)."""
    known = set(modules())
    for rule in RULES:
        assert rule.package in known or rule.package in ("halyard.scheduling", "halyard.parallelism"), rule.package
