"""``halyard whatif --add-node SPEC``: a node written with the cluster file's words.

SPEC is comma-separated ``KEY=VALUE`` (as ``halyard submit --env``) with the keys of a cluster
file's ``[[racks.nodes]]`` block (docs/cluster-format.md) and its units, plus ``rack``::

    rack=r3,gpu_type=A100,gpus=8,cpus=96,memory_gb=1000,fabric=nvswitch,fabric_gbyte_s=300,nic_gbit_s=200
    rack=r3,count=4                      # four more nodes like r3's first

Keys left out take the rack's first node's value on the control plane (which also checks the rack,
the GPU type and the names against the live cluster); ``count`` adds that many (a ``name`` then
holds ``{i}``, 0, 1, ...). Here only the form is checked: a clear error names the SPEC, the key and
what is wrong.
"""

from __future__ import annotations

from typing import TypedDict

from halyard.datamodel import ValidationError
from halyard.datamodel.cluster_toml import GBIT_PER_GBYTE
from halyard.v1 import types_pb2 as tpb

FLAG = "--add-node"
MAX_COUNT = 1000  # nodes one SPEC may add (the control plane's bound on a change's added nodes)
_TEXT = ("rack", "name", "gpu_type", "fabric")
_INTS = ("count", "gpus", "cpus")
_FLOATS = ("memory_gb", "fabric_gbyte_s", "nic_gbit_s")
KEYS = (*_TEXT, *_INTS, *_FLOATS)


class _NodeFields(TypedDict, total=False):
    """The ``NodeSpec`` fields a SPEC gives (the rest are left unset, so the rack's first node's apply)."""

    rack: str
    gpu_type: str
    fabric: str
    gpus: int
    cpus: int
    memory_mb: int
    fabric_gbyte_s: float
    nic_gbyte_s: float


def _number(kind: type, key: str, value: str, where: str) -> float:
    try:
        number = kind(value)
    except ValueError:
        raise ValidationError(f"{key}={value!r}: {key} must be {'a whole number' if kind is int else 'a number'}",
                              field=where) from None
    if not number > 0 or number == float("inf"):
        raise ValidationError(f"{key}={value!r}: {key} must be positive", field=where)
    return number


def parse_node_spec(text: str) -> list[tpb.NodeSpec]:
    """The nodes one ``--add-node`` SPEC adds (``count`` of them), or a :class:`ValidationError`."""
    where = FLAG
    values: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip().strip("\"'")
        if not sep or not key:
            raise ValidationError(f"expected KEY=VALUE in {text!r}, got {item!r} (keys: {', '.join(KEYS)})",
                                  field=where)
        if key not in KEYS:
            raise ValidationError(f"unknown key {key!r} in {text!r} (keys of a cluster file's [[racks.nodes]] and "
                                  f"rack: {', '.join(KEYS)})", field=where)
        if key in values:
            raise ValidationError(f"{key} given twice in {text!r}", field=where)
        if not value:
            raise ValidationError(f"{key} has no value in {text!r}", field=where)
        values[key] = value
    if not values:
        raise ValidationError("is empty: give at least rack=RACK (a node like the rack's first)", field=where)
    count = int(_number(int, "count", values["count"], where)) if "count" in values else 1
    if count > MAX_COUNT:
        raise ValidationError(f"count={count}: at most {MAX_COUNT}", field=where)
    name = values.get("name", "")
    if count > 1 and name and "{i}" not in name:
        raise ValidationError(f"name={name!r} must contain {{i}} when count > 1", field=where)
    fields = _NodeFields()
    if "rack" in values:
        fields["rack"] = values["rack"]
    if "gpu_type" in values:
        fields["gpu_type"] = values["gpu_type"]
    if "fabric" in values:
        fields["fabric"] = values["fabric"]
    if "gpus" in values:
        fields["gpus"] = int(_number(int, "gpus", values["gpus"], where))
    if "cpus" in values:
        fields["cpus"] = int(_number(int, "cpus", values["cpus"], where))
    if "memory_gb" in values:
        fields["memory_mb"] = round(_number(float, "memory_gb", values["memory_gb"], where) * 1000)
    if "fabric_gbyte_s" in values:
        fields["fabric_gbyte_s"] = _number(float, "fabric_gbyte_s", values["fabric_gbyte_s"], where)
    if "nic_gbit_s" in values:
        fields["nic_gbyte_s"] = _number(float, "nic_gbit_s", values["nic_gbit_s"], where) / GBIT_PER_GBYTE
    return [tpb.NodeSpec(name=name.replace("{i}", str(i)), **fields) for i in range(count)]


def parse_node_specs(texts: list[str]) -> list[tpb.NodeSpec]:
    """Every ``--add-node`` of a command line, in order."""
    return [node for text in texts for node in parse_node_spec(text)]
