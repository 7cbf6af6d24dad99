"""Load a :class:`Cluster` from TOML, validating every field.

Format (``docs/cluster-format.md`` has the full reference)::

    name = "default"
    spine_oversubscription = 2.0

    [[racks]]
    name = "r{i}"            # {i}: rack index in the cluster
    count = 2                # this block stands for 2 identical racks
    uplink_gbit_s = 800

    [[racks.nodes]]
    name = "{rack}-n{i}"     # {i}: node index in the rack
    count = 4
    gpu_type = "V100"
    gpus = 8
    cpus = 24
    memory_gb = 500
    fabric = "nvlink"
    fabric_gbyte_s = 150
    nic_gbit_s = 200

Optionally, switches and the links between them (then racks have no ``uplink_gbit_s``:
a rack is its ToR switch, named as the rack)::

    [[switches]]
    name = "agg{i}"
    count = 2

    [[links]]
    a = "r0"                 # a rack's ToR or a switch
    b = "agg0"
    gbit_s = 50

Errors name the file, the line and the field.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from halyard.datamodel.cluster import Cluster, Fabric, Node, Rack, SwitchLink
from halyard.datamodel.errors import ValidationError
from halyard.datamodel.toml_text import parse_toml

GBIT_PER_GBYTE = 8.0  # 8 bits per byte

_TOP_KEYS = {"name", "description", "spine_oversubscription", "racks", "quotas", "switches", "links"}
_SWITCH_KEYS = {"name", "count"}
_LINK_KEYS = {"a", "b", "gbit_s"}
_RACK_KEYS = {"name", "count", "uplink_gbit_s", "nodes"}
_NODE_KEYS = {
    "name", "count", "gpu_type", "gpus", "cpus", "memory_gb",
    "fabric", "fabric_gbyte_s", "nic_gbit_s",
}
_HEADER = re.compile(r"^\s*\[\[\s*([A-Za-z0-9_.]+)\s*\]\]")
_KEY = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=")


def builtin_clusters() -> list[str]:
    """Names accepted by :func:`load_cluster` besides file paths."""
    folder = resources.files("halyard.data") / "clusters"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def load_cluster(name_or_path: str | Path) -> Cluster:
    """Load a built-in cluster by name, or a TOML file by path."""
    text, source = read_cluster_text(name_or_path)
    return parse_cluster(text, source=source)


def cluster_digest(text: str) -> str:
    """SHA-256 (hex) of a cluster file's text: how an agent and the control plane agree, without
    shipping the file, that they hold the same cluster (Register/Registered.cluster_digest)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_cluster_text(name_or_path: str | Path) -> tuple[str, str]:
    """The TOML text of a built-in cluster or file, and a name for it in errors.

    The control plane sends this text to agents, so both sides parse the same cluster.
    """
    path = Path(name_or_path)
    if path.suffix != ".toml" and str(name_or_path) in builtin_clusters():
        res = resources.files("halyard.data") / "clusters" / f"{name_or_path}.toml"
        return res.read_text(encoding="utf-8"), f"<builtin {name_or_path}>"
    if not path.exists():
        close = difflib.get_close_matches(str(name_or_path), builtin_clusters(), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValidationError(
            f"no such cluster file or built-in cluster ({hint}built-ins: {', '.join(builtin_clusters())})",
            source=str(name_or_path),
        )
    if path.is_dir():
        raise ValidationError("is a directory, not a cluster file (a .toml file, docs/cluster-format.md)",
                              source=str(name_or_path))
    return path.read_text(encoding="utf-8"), str(path)


@dataclass
class _Locator:
    """Finds the line of a key in an array-of-tables TOML document.

    tomllib returns plain dicts without positions, so errors are located by
    re-reading the text: headers ``[[racks]]`` and ``[[racks.nodes]]`` are
    counted and the key is searched within the block it belongs to.
    """

    lines: list[str]

    def line_in_block(self, section: str, index: int, key: str) -> int | None:
        """The line of ``key`` in the ``index``-th ``[[section]]`` block (top-level arrays)."""
        count, current = -1, ""
        for lineno, raw in enumerate(self.lines, start=1):
            text = raw.split("#", 1)[0]
            header = _HEADER.match(text)
            if header:
                current = header.group(1)
                count += current == section
                continue
            m = _KEY.match(text)
            if m and m.group(1) == key and current == section and count == index:
                return lineno
        return None

    def line_of(self, key: str, rack: int | None = None, node: int | None = None) -> int | None:
        racks = nodes = -1
        section = ""
        for lineno, raw in enumerate(self.lines, start=1):
            text = raw.split("#", 1)[0]
            header = _HEADER.match(text)
            if header:
                section = header.group(1)
                if section == "racks":
                    racks, nodes = racks + 1, -1
                elif section == "racks.nodes":
                    nodes += 1
                continue
            m = _KEY.match(text)
            if not m or m.group(1) != key:
                continue
            here = {"": (None, None), "racks": (racks, None), "racks.nodes": (racks, nodes)}.get(section)
            if here == (rack, node):
                return lineno
        return None


def parse_cluster(text: str, *, source: str = "<string>") -> Cluster:
    doc = parse_toml(text, source=source)
    loc = _Locator(text.splitlines())

    def fail(msg: str, key: str, rack: int | None = None, node: int | None = None) -> ValidationError:
        if rack is None:
            field = key
        elif node is None:
            field = f"racks[{rack}].{key}"
        else:
            field = f"racks[{rack}].nodes[{node}].{key}"
        return ValidationError(msg, source=source, line=loc.line_of(key, rack, node), field=field)

    def get(table: dict[str, Any], key: str, kind: type, *, rack: int | None = None,
            node: int | None = None, default: Any = None, positive: bool = True) -> Any:
        if key not in table:
            if default is not None:
                return default
            raise fail("is required", key, rack, node)
        value = table[key]
        ok = isinstance(value, kind) and not isinstance(value, bool)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if not ok:
            raise fail(f"must be {kind.__name__}, got {value!r}", key, rack, node)
        if positive and kind in (int, float) and value <= 0:
            raise fail(f"must be positive, got {value!r}", key, rack, node)
        return value

    def no_unknown(table: dict[str, Any], allowed: set[str], rack: int | None = None, node: int | None = None) -> None:
        for key in table:
            if key not in allowed:
                raise fail(f"unknown key (allowed: {', '.join(sorted(allowed))})", key, rack, node)

    no_unknown(doc, _TOP_KEYS)
    name = get(doc, "name", str)
    switched = "links" in doc
    if "switches" in doc and not switched:
        raise ValidationError("[[switches]] need [[links]] that join them to racks or other switches",
                              source=source, field="switches")
    if switched and "spine_oversubscription" in doc:
        raise fail("has no meaning with [[links]]: give the switch links' capacities instead",
                   "spine_oversubscription")
    oversub = get(doc, "spine_oversubscription", float, default=1.0)
    rack_blocks = doc.get("racks")
    if not isinstance(rack_blocks, list) or not rack_blocks:
        raise ValidationError("at least one [[racks]] block is required", source=source, field="racks")

    racks: list[Rack] = []
    nodes: list[Node] = []
    seen: set[str] = set()
    for r, rblock in enumerate(rack_blocks):
        no_unknown(rblock, _RACK_KEYS, r)
        rcount = get(rblock, "count", int, rack=r, default=1)
        rpattern = get(rblock, "name", str, rack=r, default="r{i}")
        if switched and "uplink_gbit_s" in rblock:
            raise fail("has no meaning with [[links]]: link the rack (its ToR) to switches instead",
                       "uplink_gbit_s", r)
        uplink = 0.0 if switched else get(rblock, "uplink_gbit_s", float, rack=r) / GBIT_PER_GBYTE
        node_blocks = rblock.get("nodes")
        if not isinstance(node_blocks, list) or not node_blocks:
            raise fail("each rack needs at least one [[racks.nodes]] block", "nodes", r)
        if rcount > 1 and "{i}" not in rpattern:
            raise fail("must contain {i} when count > 1", "name", r)
        for _ in range(rcount):
            rack_index = len(racks)
            rack_name = rpattern.format(i=rack_index)
            if rack_name in seen:
                raise fail(f"duplicate name {rack_name!r}", "name", r)
            seen.add(rack_name)
            members: list[int] = []
            for k, nblock in enumerate(node_blocks):
                no_unknown(nblock, _NODE_KEYS, r, k)
                ncount = get(nblock, "count", int, rack=r, node=k, default=1)
                npattern = get(nblock, "name", str, rack=r, node=k, default="{rack}-n{i}")
                fabric_name = get(nblock, "fabric", str, rack=r, node=k)
                try:
                    fabric = Fabric(fabric_name.lower())
                except ValueError:
                    raise fail(f"unknown fabric {fabric_name!r} (one of: "
                               f"{', '.join(f.value for f in Fabric)})", "fabric", r, k) from None
                spec = dict(
                    gpu_type=get(nblock, "gpu_type", str, rack=r, node=k),
                    gpus=get(nblock, "gpus", int, rack=r, node=k),
                    cpus=get(nblock, "cpus", int, rack=r, node=k),
                    memory_mb=round(get(nblock, "memory_gb", float, rack=r, node=k) * 1000),
                    fabric=fabric,
                    fabric_gbyte_s=get(nblock, "fabric_gbyte_s", float, rack=r, node=k),
                    nic_gbyte_s=get(nblock, "nic_gbit_s", float, rack=r, node=k) / GBIT_PER_GBYTE,
                )
                if ncount > 1 and "{i}" not in npattern:
                    raise fail("must contain {i} when count > 1", "name", r, k)
                for _ in range(ncount):
                    node_name = npattern.format(rack=rack_name, i=len(members))
                    if node_name in seen:
                        raise fail(f"duplicate name {node_name!r}", "name", r, k)
                    seen.add(node_name)
                    members.append(len(nodes))
                    nodes.append(Node(name=node_name, rack=rack_name, index=len(nodes),
                                      rack_index=rack_index, **spec))
            racks.append(Rack(name=rack_name, index=rack_index,
                              node_indices=tuple(members), uplink_gbyte_s=uplink))
    quotas = doc.get("quotas", {})
    if not isinstance(quotas, dict):
        raise fail("must be a table of tenant = GPUs", "quotas")
    for tenant, gpus in quotas.items():
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
            raise fail(f"tenant {tenant!r}: a nominal quota is a whole number of GPUs >= 0, got {gpus!r}",
                       "quotas")
    switches, links = _switch_links(doc, source, loc, racks, seen) if switched else ((), ())
    if links:  # a rack's uplink is then the sum of its ToR's links (informational)
        racks = [Rack(name=r.name, index=r.index, node_indices=r.node_indices,
                      uplink_gbyte_s=sum(k.gbyte_s for k in links if r.name in (k.a, k.b))) for r in racks]
    cluster = Cluster(name=name, racks=tuple(racks), nodes=tuple(nodes),
                      spine_oversubscription=oversub, description=str(doc.get("description", "")),
                      quotas=MappingProxyType(dict(quotas)), switches=switches, links=links)
    for r in range(1, len(racks) if links else 0):
        try:
            cluster.route(0, r)
        except ValueError as e:
            raise ValidationError(str(e), source=source, field="links") from None
    return cluster


def _switch_links(doc: dict[str, Any], source: str, loc: _Locator, racks: list[Rack],
                  seen: set[str]) -> tuple[tuple[str, ...], tuple[SwitchLink, ...]]:
    """The ``[[switches]]`` and ``[[links]]`` blocks: switch names, and links between racks' ToRs and switches."""
    def fail(msg: str, section: str, i: int, key: str) -> ValidationError:
        return ValidationError(msg, source=source, line=loc.line_in_block(section, i, key),
                               field=f"{section}[{i}].{key}")

    switches: list[str] = []
    blocks = doc.get("switches", [])
    if not isinstance(blocks, list):
        raise ValidationError("must be an array of [[switches]] tables", source=source, field="switches")
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise ValidationError(f"switches[{i}] must be a table, got {block!r}", source=source,
                                  field=f"switches[{i}]")
        for key in block:
            if key not in _SWITCH_KEYS:
                raise fail(f"unknown key (allowed: {', '.join(sorted(_SWITCH_KEYS))})", "switches", i, key)
        pattern, count = block.get("name"), block.get("count", 1)
        if not isinstance(pattern, str) or not pattern:
            raise fail(f"must be a non-empty str, got {pattern!r}", "switches", i, "name")
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            raise fail(f"must be a positive int, got {count!r}", "switches", i, "count")
        if count > 1 and "{i}" not in pattern:
            raise fail("must contain {i} when count > 1", "switches", i, "name")
        try:
            names = [pattern.format(i=k) for k in range(count)]
        except (KeyError, IndexError, ValueError) as e:
            raise fail(f"may hold only the placeholder {{i}}, got {pattern!r} ({e!r})", "switches", i, "name") from None
        for switch in names:
            if switch in seen:
                raise fail(f"duplicate name {switch!r}", "switches", i, "name")
            seen.add(switch)
            switches.append(switch)
    ends = {r.name for r in racks} | set(switches)
    links: list[SwitchLink] = []
    pairs: set[frozenset[str]] = set()
    blocks = doc["links"]
    if not isinstance(blocks, list) or not blocks:
        raise ValidationError("must be a non-empty array of [[links]] tables", source=source, field="links")
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            raise ValidationError(f"links[{i}] must be a table, got {block!r}", source=source, field=f"links[{i}]")
        for key in block:
            if key not in _LINK_KEYS:
                raise fail(f"unknown key (allowed: {', '.join(sorted(_LINK_KEYS))})", "links", i, key)
        for key in ("a", "b", "gbit_s"):
            if key not in block:
                raise fail("is required", "links", i, key)
        for key in ("a", "b"):
            if not isinstance(block[key], str):
                raise fail(f"must be the name of a rack or a switch, got {block[key]!r}", "links", i, key)
            if block[key] not in ends:
                raise fail(f"{block[key]!r} is neither a rack nor a switch", "links", i, key)
        gbit = block["gbit_s"]
        if isinstance(gbit, bool) or not isinstance(gbit, int | float) or gbit <= 0:
            raise fail(f"must be a positive number, got {gbit!r}", "links", i, "gbit_s")
        pair = frozenset((block["a"], block["b"]))
        if len(pair) < 2:
            raise fail(f"a link joins two different ends, got {block['a']!r} twice", "links", i, "b")
        if pair in pairs:
            raise fail(f"duplicate link {block['a']!r} - {block['b']!r}", "links", i, "b")
        pairs.add(pair)
        links.append(SwitchLink(block["a"], block["b"], float(gbit) / GBIT_PER_GBYTE))
    return tuple(switches), tuple(links)
