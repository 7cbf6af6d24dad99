"""Dally Table 1 reproduced with the performance model's collective and overlap formulas.

Dally's Table 1 gives the exposed communication of six models as a percentage of
compute for 8 GPUs on one machine, two machines of one rack and two racks. Its
figures come from ASTRA-sim with Dally's calibrated (and tiny) per-iteration
compute, one all-reduce per layer, and cross-iteration overlap. This module feeds
those inputs (``data/dally_table1.toml``, every number sourced) through the same
functions :class:`~halyard.emulator.PerformanceModel` uses
(:func:`~halyard.emulator.collectives.allreduce_s`,
:func:`~halyard.emulator.collectives.hierarchical_allreduce_s`,
:func:`~halyard.emulator.collectives.exposed_s`) and returns the model's Table 1.

The three per-tier latencies of Dally's network are the only fitted numbers:
:func:`fit_dally_latencies` finds them by least squares on ``log10(1 + %)`` over
the 18 cells (``benchmarks/fit_dally_table1.py`` prints the fit). Method, table
and the cells it misses: docs/performance-model.md, "Against Dally Table 1".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from types import MappingProxyType
from typing import Any

import numpy as np

from halyard.datamodel import ValidationError, parse_toml
from halyard.emulator.collectives import GBYTE, exposed_s, hierarchical_allreduce_s, ring_allreduce_s

DALLY_FILE = "dally_table1.toml"
TIERS = ("machine", "rack", "network")
# The search grid of fit_dally_latencies (log10 seconds): node, rack, network latency.
FIT_GRID = ((-9.0, -6.0, 61), (-7.0, -4.0, 61), (-5.5, -3.0, 51))


@dataclass(frozen=True, slots=True)
class DallyNetwork:
    """Dally's three-tier network as ASTRA-sim sees it (bandwidths per GPU link)."""

    gpus_per_machine: int
    split: int  # GPUs per machine in the rack and network placements (4 + 4)
    intra_gbyte_s: float
    rack_gbyte_s: float
    network_gbyte_s: float
    node_latency_s: float
    rack_latency_s: float
    network_latency_s: float
    sources: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class DallyWorkload:
    """One model of Table 1: the table's row and Dally's inputs for it."""

    name: str  # the catalog model of the same name
    table_pct: tuple[float, float, float]  # machine, rack, network
    compute_s: float
    backward_fraction: float
    layers: int
    gradient_bytes: float
    sources: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class DallyTable:
    network: DallyNetwork
    workloads: Mapping[str, DallyWorkload]


def load_dally_table1() -> DallyTable:
    """The bundled ``data/dally_table1.toml``."""
    text = (resources.files("halyard.emulator") / "data" / DALLY_FILE).read_text(encoding="utf-8")
    source = f"<builtin {DALLY_FILE}>"
    doc = parse_toml(text, source=source)

    def fig(table: Mapping[str, Any], key: str, where: str) -> tuple[Any, str]:
        raw = table.get(key)
        if not isinstance(raw, dict) or set(raw) != {"value", "source"} or not str(raw["source"]).strip():
            raise ValidationError("must be { value = ..., source = \"...\" }", source=source, field=f"{where}.{key}")
        return raw["value"], raw["source"]

    net_doc = doc["network"]
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key in ("gpus_per_machine", "split", "intra_gbyte_s", "rack_gbyte_s", "network_gbyte_s",
                "node_latency_s", "rack_latency_s", "network_latency_s"):
        values[key], sources[key] = fig(net_doc, key, "network")
    network = DallyNetwork(**values, sources=MappingProxyType(sources))
    workloads: dict[str, DallyWorkload] = {}
    for name, body in doc["models"].items():
        vals: dict[str, Any] = {}
        srcs: dict[str, str] = {}
        for key in ("table_pct", "compute_s", "backward_fraction", "layers", "gradient_bytes"):
            vals[key], srcs[key] = fig(body, key, f"models.{name}")
        workloads[name] = DallyWorkload(
            name=name, table_pct=tuple(float(v) for v in vals["table_pct"]),  # type: ignore[arg-type]
            compute_s=float(vals["compute_s"]), backward_fraction=float(vals["backward_fraction"]),
            layers=int(vals["layers"]), gradient_bytes=float(vals["gradient_bytes"]),
            sources=MappingProxyType(srcs))
    return DallyTable(network=network, workloads=MappingProxyType(workloads))


def dally_communication_s(w: DallyWorkload, net: DallyNetwork, tier: int) -> float:
    """All-reduce time of one iteration (every layer's message) at tier 0, 1 or 2.

    Machine: a ring of the 8 GPUs over NVSwitch. Rack and network: two machines of
    ``split`` GPUs, two-level all-reduce with one link per GPU (ASTRA-sim's
    hierarchical topology, ``rails=True``).
    """
    s, m = w.gradient_bytes, w.layers
    if tier == 0:
        return ring_allreduce_s(s, net.gpus_per_machine, net.intra_gbyte_s, net.node_latency_s, messages=m)
    bw, lat = ((net.rack_gbyte_s, net.rack_latency_s) if tier == 1
               else (net.network_gbyte_s, net.network_latency_s))
    return hierarchical_allreduce_s(s, net.split, 2, net.intra_gbyte_s, bw, net.node_latency_s, lat,
                                    messages=m, rails=True)


def dally_overheads_pct(w: DallyWorkload, net: DallyNetwork) -> tuple[float, float, float]:
    """The model's machine / rack / network exposed communication as % of compute.

    Overlap is layer-wise (a layer's all-reduce may run until its next forward, so
    the window is the whole compute), one message per layer.
    """
    return tuple(  # type: ignore[return-value]
        100.0 * exposed_s(dally_communication_s(w, net, tier), w.compute_s, w.layers) / w.compute_s
        for tier in range(3))


def dally_fit_loss(table: DallyTable, net: DallyNetwork | None = None) -> float:
    """Sum over the 18 cells of ``(log10(1 + model %) - log10(1 + table %))^2``."""
    net = net or table.network
    loss = 0.0
    for w in table.workloads.values():
        for model, paper in zip(dally_overheads_pct(w, net), w.table_pct, strict=True):
            loss += (math.log10(1 + model) - math.log10(1 + paper)) ** 2
    return loss


def fit_dally_latencies(table: DallyTable) -> tuple[DallyNetwork, float]:
    """Grid search of the three latencies (``FIT_GRID``) minimising :func:`dally_fit_loss`.

    Vectorised over the grid; the closed forms are those of
    :func:`dally_communication_s` and :func:`~halyard.emulator.collectives.exposed_s`.
    """
    net = table.network
    grids = [np.logspace(lo, hi, n) for lo, hi, n in FIT_GRID]
    a_node = grids[0][:, None, None]
    a_rack = grids[1][None, :, None]
    a_net = grids[2][None, None, :]
    k, n = net.split, net.gpus_per_machine
    loss = np.zeros((len(grids[0]), len(grids[1]), len(grids[2])))
    for w in table.workloads.values():
        s, m, c = w.gradient_bytes, w.layers, w.compute_s
        machine = 2 * (n - 1) / n * s / (net.intra_gbyte_s * GBYTE) + m * 2 * (n - 1) * a_node
        intra = 2 * (k - 1) / k * s / (net.intra_gbyte_s * GBYTE) + m * 2 * (k - 1) * a_node
        rack = intra + (s / k) / (net.rack_gbyte_s * GBYTE) + m * 2 * a_rack
        network = intra + (s / k) / (net.network_gbyte_s * GBYTE) + m * 2 * a_net
        for comm, paper in zip((machine, rack, network), w.table_pct, strict=True):
            pct = 100.0 * np.maximum(comm / m, comm - (1 - 1 / m) * c) / c
            loss = loss + (np.log10(1 + pct) - math.log10(1 + paper)) ** 2
    i, j, q = np.unravel_index(int(np.argmin(loss)), loss.shape)
    best = replace(net, node_latency_s=float(grids[0][i]), rack_latency_s=float(grids[1][j]),
                   network_latency_s=float(grids[2][q]))
    return best, float(loss[i, j, q])
