"""The model catalog: per-model profiles and the model's named constants.

The catalog lives in ``emulator/data/models.toml`` (shipped as package data of
``halyard.emulator``). Every figure there is ``{ value = ..., source = "..." }``
so that each number carries where it came from; this module checks that and
turns the file into frozen dataclasses. Errors name the file, the line where it
can be found, and the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from halyard.datamodel import ValidationError, parse_toml

BUILTIN_CATALOG = "models.toml"
SCHEMA_VERSION = 2
TASKS = ("image", "language", "speech")  # Synergy Table 4's three task classes
# GPU types every model must be costed on: the papers' clusters are V100 (Synergy,
# Dally-era), P100 (Philly, Gavel) and A100 (ElasticFlow, Crius).
REQUIRED_GPU_TYPES = ("V100", "P100", "A100")

_MODEL_KEYS = {"task", "description", "reference_batch", "gradient_bytes", "backward_fraction",
               "activation_bytes", "compute_s", "data", "layers", "layer_output_bytes", "moe_layers",
               "experts", "expert_fraction"}
_DATA_KEYS = {"best_cpus", "best_memory_gb", "best_speedup"}
_CONSTANT_KEYS = {
    "node_latency_s", "rack_latency_s", "spine_latency_s",
    "restart_fixed_s", "checkpoint_gbyte_s", "checkpoint_state_factor",
    "state_bytes_per_parameter", "optimizer_step_bytes_per_parameter", "framework_reserve_bytes",
    "ddp_bucket_bytes", "proportional_cpus_per_gpu", "proportional_memory_gb_per_gpu",
    "gradient_copy_gbyte_s",
}
_GPU_KEYS = {"memory_gib", "tensor_tflops", "memory_gbyte_s"}
_TOP_KEYS = {"schema_version", "constants", "gpus", "models", "tier_overhead"}
# A model's [tier_overhead.M] table: exposed communication as a fraction of compute per tier.
TIER_OVERHEAD_KEYS = ("machine", "rack", "network")
# Profiles shipped with Halyard, loadable by name (``--catalog dally-table1``): name -> file in data/.
BUILTIN_PROFILES = {"dally-table1": "profile_dally_table1.toml", "h200-measured": "profile_h200_measured.toml"}
GIB = 1024**3  # bytes per GiB: GPU memory is built in binary units
# The GPU scaling rule's validation pair: ResNet-50 mixed precision, A100 / V100 time
# (NVIDIA DeepLearningExamples, REFERENCE-NUMBERS.md: 1200 vs 2470 img/s).
SCALING_RULE = ("estimate: {anchor} figure x {ratio:.3f}, the GPU scaling rule (time proportional to "
                "1 / sqrt(dense FP16 tensor TFLOPS x memory GB/s), [gpus] table; the rule gives A100/V100 "
                "0.481 against 0.486 measured for ResNet-50 AMP and T4/V100 2.32 against 2.44 for "
                "EasyScale ResNet-50, REFERENCE-NUMBERS.md)")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


@dataclass(frozen=True, slots=True)
class Figure:
    """One number and where it comes from."""

    value: float
    source: str

    @property
    def estimated(self) -> bool:
        return self.source.lower().startswith("estimate")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """What the performance model knows about one GPU type (datasheet figures)."""

    name: str
    memory_bytes: float
    tensor_tflops: float  # dense FP16/BF16 tensor-core peak (plain FP16 without tensor cores)
    memory_gbyte_s: float
    sources: Mapping[str, str]

    @property
    def speed_score(self) -> float:
        """``sqrt(tensor TFLOPS x memory GB/s)``: the GPU scaling rule's relative speed."""
        return math.sqrt(self.tensor_tflops * self.memory_gbyte_s)


@dataclass(frozen=True, slots=True)
class DataProfile:
    """Synergy's sensitivity summary: the best CPU/memory demand per GPU and its speed-up
    over the GPU-proportional share (docs/performance-model.md, "Data stalls")."""

    best_cpus: float
    best_memory_gb: float
    best_speedup: float


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What the performance model knows about one model.

    ``compute_s`` maps a GPU type to seconds per iteration on one GPU at
    ``reference_batch`` (per GPU), without communication or data stalls;
    ``derived`` names the GPU types whose figure the loader filled in with the
    GPU scaling rule. ``activation_bytes`` is the memory of the activations
    kept for backward at ``reference_batch`` on one GPU. ``sources`` maps each
    field (``"gradient_bytes"``, ``"compute_s.V100"``, ...) to its source string.
    """

    name: str
    task: str
    description: str
    reference_batch: int
    gradient_bytes: float
    backward_fraction: float
    compute_s: Mapping[str, float]
    sources: Mapping[str, str]
    activation_bytes: float = 0.0
    derived: frozenset[str] = frozenset()
    data: DataProfile | None = None  # None: not input-bound (flat in CPUs and memory)
    # Tensor and pipeline parallelism (halyard.emulator.parallel): the layers a plan splits over
    # stages and shards, and one layer's output activation per sample (what a pipeline stage sends
    # and a tensor-parallel collective carries). 0: unknown, the model runs data parallel only.
    layers: int = 0
    layer_output_bytes: float = 0.0
    # GShard MoE: how many of ``layers`` are top-2 gated MoE layers, each with expert-parallel all-to-alls
    # (halyard.emulator.parallel.expert_all_to_all). 0: a dense model.
    moe_layers: int = 0
    # Experts per MoE layer and the share of the parameters they hold. GShard shards the experts over the
    # devices that split the batch (§2.2): a data-parallel group of ``d`` holds ``1/min(d, experts)`` of them
    # per GPU and does not all-reduce their gradients. 0: every parameter is replicated (a dense model).
    experts: int = 0
    expert_fraction: float = 0.0

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(self.compute_s)

    @property
    def parameters(self) -> float:
        """Trainable parameters: ``gradient_bytes`` holds one fp32 gradient per parameter."""
        return self.gradient_bytes / 4.0

    def held_parameters(self, data: int) -> float:
        """Parameters one GPU of a data-parallel group of ``data`` holds (its share of the experts)."""
        if self.experts <= 0:
            return self.parameters
        return self.parameters * (1.0 - self.expert_fraction + self.expert_fraction / min(max(data, 1), self.experts))

    def reduced_gradient_bytes(self, data: int) -> float:
        """Gradient bytes a data-parallel group of ``data`` all-reduces: the replicated parameters'. An expert is
        replicated only when the group outnumbers the experts; its shard is then counted as if all-reduced over
        the whole group (an upper bound: its replicas are ``data / experts`` of the group)."""
        if self.experts <= 0:
            return self.gradient_bytes
        sharded = self.expert_fraction / self.experts if data > self.experts else 0.0
        return self.gradient_bytes * (1.0 - self.expert_fraction + sharded)

    def estimated(self, field: str) -> bool:
        """Whether a field's figure (``"compute_s.T4"``, ...) is an estimate."""
        return self.sources.get(field, "").lower().startswith("estimate")

    def compute_time_s(self, gpu_type: str) -> float | None:
        """Seconds per iteration at the reference batch, or None if not profiled."""
        t = self.compute_s.get(gpu_type)
        return t if t is not None else self.compute_s.get(gpu_type.upper())


@dataclass(frozen=True, slots=True)
class Constants:
    """The performance model's hardware and restart constants (see models.toml)."""

    node_latency_s: float  # one ring step inside a node (NVLink/NVSwitch/PCIe)
    rack_latency_s: float  # one ring step between nodes of one rack (RDMA)
    spine_latency_s: float  # one ring step between racks
    restart_fixed_s: float  # fixed checkpoint/restore and relaunch cost
    checkpoint_gbyte_s: float  # bandwidth a restore reads the checkpoint at
    checkpoint_state_factor: float  # checkpoint bytes / gradient bytes
    state_bytes_per_parameter: float  # weights + gradients + optimizer state per parameter
    optimizer_step_bytes_per_parameter: float  # memory traffic of one optimizer step
    framework_reserve_bytes: float  # CUDA context, workspaces, fragmentation per process
    ddp_bucket_bytes: float  # gradient bucket of data-parallel all-reduce
    proportional_cpus_per_gpu: float  # Synergy's server: where the sensitivity matrices are 1.0
    proportional_memory_gb_per_gpu: float
    gradient_copy_gbyte_s: float  # device-to-host copy of a time-sliced EST's gradients
    sources: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Catalog:
    models: Mapping[str, ModelProfile]
    constants: Constants
    source: str
    gpus: Mapping[str, GpuSpec] = field(default_factory=lambda: MappingProxyType({}))
    # The text of the profile (``--catalog FILE``) laid over the built-in catalog, "" for none: what a
    # control plane sends its emulated agents so they compute with the same catalog.
    profile_text: str = ""
    # Model -> exposed communication as a fraction of compute on (one machine, one rack, the network):
    # replaces the collective model for that model (Dally §4.2.1's method; docs/performance-model.md).
    tier_overhead: Mapping[str, tuple[float, float, float]] = field(default_factory=lambda: MappingProxyType({}))


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Load the built-in catalog (``path=None``) or a catalog file."""
    if path is None:
        res = resources.files("halyard.emulator") / "data" / BUILTIN_CATALOG
        return parse_catalog(res.read_text(encoding="utf-8"), source=f"<builtin {BUILTIN_CATALOG}>")
    p = Path(path)
    if not p.exists():
        raise ValidationError("no such catalog file", source=str(p))
    return parse_catalog(p.read_text(encoding="utf-8"), source=str(p))


def load_model_catalog(path: str | Path | None) -> Catalog:
    """The catalog of ``--catalog FILE``: the built-in catalog with FILE laid over it (None: the built-in).

    A name of :data:`BUILTIN_PROFILES` that is not a file names a profile shipped with Halyard."""
    if path is None:
        return load_catalog()
    p = Path(path)
    if not p.exists() and str(path) in BUILTIN_PROFILES:
        res = resources.files("halyard.emulator") / "data" / BUILTIN_PROFILES[str(path)]
        return extend_catalog(load_catalog(), res.read_text(encoding="utf-8"), source=f"<builtin profile {path}>")
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"cannot read the catalog profile: {exc.strerror or exc}", source=str(p),
                              field="--catalog") from None
    return extend_catalog(load_catalog(), text, source=str(p))


def extend_catalog(base: Catalog, text: str, *, source: str = "<profile>") -> Catalog:
    """``base`` with a profile laid over it: what ``halyard calibrate --out`` writes, or any part of a catalog.

    The profile has the catalog's schema with every table optional: ``[constants]`` entries
    replace the base's one by one, a ``[gpus.T]`` table adds or replaces a GPU type, a
    ``[models.M]`` table adds or replaces a model. A profile's model needs ``compute_s`` on
    at least one GPU type of the merged ``[gpus]`` table; the other types are derived by
    the GPU scaling rule (marked as estimates), as are the base models' types that had no
    figure of their own, now against the merged GPU table (a measured GPU spec changes them).
    """
    if base.profile_text:
        raise ValidationError("one profile at a time: the base catalog already has one", source=source,
                              field="--catalog")
    doc, fail = _document(text, source)
    if not any(key in doc for key in ("constants", "gpus", "models", "tier_overhead")):
        raise fail("the profile holds nothing: give [gpus.TYPE], [models.NAME], [tier_overhead.NAME] or "
                   "[constants] tables", "models")
    constants = base.constants
    if "constants" in doc:
        table = _table(doc, "constants", fail)
        figures = {}
        for key in table:
            if key not in _CONSTANT_KEYS:
                raise fail(f"unknown constant (allowed: {', '.join(sorted(_CONSTANT_KEYS))})", f"constants.{key}")
            figures[key] = _figure(table, key, f"constants.{key}", fail, allow_zero=key.endswith("latency_s"))
        constants = replace(constants, **{k: f.value for k, f in figures.items()},
                            sources=MappingProxyType(dict(constants.sources) | {k: f.source
                                                                                for k, f in figures.items()}))
    gpus = dict(base.gpus)
    if "gpus" in doc:
        gpus |= {name: _gpu(name, body, fail) for name, body in _table(doc, "gpus", fail).items()}
    models = {name: _derive(_underived(p), gpus) for name, p in base.models.items()}
    for name, body in (_table(doc, "models", fail) if "models" in doc else {}).items():
        if name in base.models and isinstance(body, dict) and set(body) == {"compute_s"}:
            models[name] = _derive(_with_compute(_underived(base.models[name]), body["compute_s"], name, fail), gpus)
            continue
        profile = _model(name, body, fail, required=())
        if not any(g in gpus for g in profile.compute_s):
            raise fail(f"no figure on a GPU type of the [gpus] table (known: {', '.join(gpus)}); add a [gpus.TYPE] "
                       "table with memory_gib, tensor_tflops and memory_gbyte_s", f"models.{name}.compute_s")
        models[name] = _derive(profile, gpus)
    overhead = dict(base.tier_overhead)
    if "tier_overhead" in doc:
        overhead |= _tier_overhead(_table(doc, "tier_overhead", fail), models, fail)
    return Catalog(models=MappingProxyType(models), constants=constants, source=f"{base.source} + {source}",
                   gpus=MappingProxyType(gpus), profile_text=text, tier_overhead=MappingProxyType(overhead))


def _tier_overhead(table: dict[str, Any], models: Mapping[str, ModelProfile],
                   fail: Any) -> dict[str, tuple[float, float, float]]:
    """``[tier_overhead.M]`` tables: ``machine``, ``rack`` and ``network`` fractions of compute, each
    sourced, for a model of the catalog."""
    out = {}
    for name, body in table.items():
        where = f"tier_overhead.{name}"
        if name not in models:
            raise fail(f"no model {name!r} in the catalog (known: {', '.join(sorted(models))})", where)
        if not isinstance(body, dict):
            raise fail("must be a table", where)
        for key in body:
            if key not in TIER_OVERHEAD_KEYS:
                raise fail(f"unknown key (allowed: {', '.join(TIER_OVERHEAD_KEYS)})", f"{where}.{key}")
        m, r, n = (_figure(body, key, f"{where}.{key}", fail, allow_zero=True).value for key in TIER_OVERHEAD_KEYS)
        out[name] = (m, r, n)
    return out


def _with_compute(profile: ModelProfile, table: Any, name: str, fail: Any) -> ModelProfile:
    """``profile`` with the ``compute_s`` figures of a profile's table that gives only those (what
    ``halyard calibrate --models`` measures of a catalog model) added or replacing its own."""
    where = f"models.{name}.compute_s"
    if not isinstance(table, dict) or not table:
        raise fail("must be a table of GPU type -> { value, source }", where)
    figures = {gpu: _figure(table, gpu, f"{where}.{gpu}", fail) for gpu in table}
    compute = dict(profile.compute_s) | {g: f.value for g, f in figures.items()}
    sources = dict(profile.sources) | {f"compute_s.{g}": f.source for g, f in figures.items()}
    return replace(profile, compute_s=MappingProxyType(compute), sources=MappingProxyType(sources))


def _underived(profile: ModelProfile) -> ModelProfile:
    """``profile`` without the figures the scaling rule filled in (to derive them again)."""
    if not profile.derived:
        return profile
    keep = {g: v for g, v in profile.compute_s.items() if g not in profile.derived}
    sources = {k: v for k, v in profile.sources.items()
               if not (k.startswith("compute_s.") and k.removeprefix("compute_s.") in profile.derived)}
    return replace(profile, compute_s=MappingProxyType(keep), sources=MappingProxyType(sources), derived=frozenset())


def parse_catalog(text: str, *, source: str = "<string>") -> Catalog:
    doc, fail = _document(text, source)
    constants = _constants(_table(doc, "constants", fail), fail)
    gpus_doc = _table(doc, "gpus", fail)
    gpus = {name: _gpu(name, body, fail) for name, body in gpus_doc.items()}
    models_doc = _table(doc, "models", fail)
    if not models_doc:
        raise fail("the catalog needs at least one model", "models")
    models = {name: _derive(_model(name, body, fail), gpus) for name, body in models_doc.items()}
    overhead = _tier_overhead(_table(doc, "tier_overhead", fail), models, fail) if "tier_overhead" in doc else {}
    return Catalog(models=MappingProxyType(models), constants=constants, source=source,
                   gpus=MappingProxyType(gpus), tier_overhead=MappingProxyType(overhead))


def _document(text: str, source: str) -> tuple[dict[str, Any], Any]:
    """The parsed file, its top-level keys and schema version checked, and its error maker."""
    doc = parse_toml(text, source=source)
    lines = text.splitlines()

    def fail(msg: str, field: str) -> ValidationError:
        return ValidationError(msg, source=source, line=_line_of(lines, field), field=field)

    for key in doc:
        if key not in _TOP_KEYS:
            raise fail(f"unknown key (allowed: {', '.join(sorted(_TOP_KEYS))})", key)
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise fail(f"must be {SCHEMA_VERSION}, got {doc.get('schema_version')!r}", "schema_version")
    return doc, fail


def _gpu(name: str, body: Any, fail: Any) -> GpuSpec:
    where = f"gpus.{name}"
    if not isinstance(body, dict):
        raise fail("must be a table", where)
    for key in body:
        if key not in _GPU_KEYS:
            raise fail(f"unknown key (allowed: {', '.join(sorted(_GPU_KEYS))})", f"{where}.{key}")
    figs = {key: _figure(body, key, f"{where}.{key}", fail) for key in sorted(_GPU_KEYS)}
    return GpuSpec(name=name, memory_bytes=figs["memory_gib"].value * GIB,
                   tensor_tflops=figs["tensor_tflops"].value, memory_gbyte_s=figs["memory_gbyte_s"].value,
                   sources=MappingProxyType({k: f.source for k, f in figs.items()}))


def _derive(profile: ModelProfile, gpus: Mapping[str, GpuSpec]) -> ModelProfile:
    """Fill in every GPU type of ``gpus`` the model lacks, by the GPU scaling rule.

    The anchor is the model's figure on the GPU closest in speed score, measured
    figures preferred over estimates; the time scales by
    ``score(anchor) / score(target)`` (docs/performance-model.md, "Throughput matrix").
    """
    missing = [g for g in gpus if g not in profile.compute_s]
    if not missing:
        return profile
    anchors = [g for g in profile.compute_s if g in gpus]
    if not anchors:
        return profile
    measured = [g for g in anchors if not profile.estimated(f"compute_s.{g}")] or anchors
    compute = dict(profile.compute_s)
    sources = dict(profile.sources)
    for target in missing:
        score = gpus[target].speed_score
        anchor = min(measured, key=lambda g: (abs(math.log(gpus[g].speed_score / score)), g))
        ratio = gpus[anchor].speed_score / score
        compute[target] = profile.compute_s[anchor] * ratio
        sources[f"compute_s.{target}"] = SCALING_RULE.format(anchor=anchor, ratio=ratio)
    return replace(profile, compute_s=MappingProxyType(compute), sources=MappingProxyType(sources),
                   derived=frozenset(missing))


def _constants(table: dict[str, Any], fail: Any) -> Constants:
    values: dict[str, float] = {}
    sources: dict[str, str] = {}
    for key in table:
        if key not in _CONSTANT_KEYS:
            raise fail(f"unknown constant (allowed: {', '.join(sorted(_CONSTANT_KEYS))})", f"constants.{key}")
    for key in sorted(_CONSTANT_KEYS):
        fig = _figure(table, key, f"constants.{key}", fail, allow_zero=key.endswith("latency_s"))
        values[key], sources[key] = fig.value, fig.source
    return Constants(**values, sources=MappingProxyType(sources))


def _model(name: str, body: Any, fail: Any, *, required: tuple[str, ...] = REQUIRED_GPU_TYPES) -> ModelProfile:
    where = f"models.{name}"
    if not _NAME.match(name):
        raise fail("model names are lower-case letters, digits, '.', '_' and '-'", where)
    if not isinstance(body, dict):
        raise fail("must be a table", where)
    for key in body:
        if key not in _MODEL_KEYS:
            raise fail(f"unknown key (allowed: {', '.join(sorted(_MODEL_KEYS))})", f"{where}.{key}")
    task = body.get("task")
    if task not in TASKS:
        raise fail(f"must be one of {', '.join(TASKS)}, got {task!r}", f"{where}.task")
    description = body.get("description", "")
    if not isinstance(description, str):
        raise fail("must be a string", f"{where}.description")
    sources: dict[str, str] = {}
    batch = _figure(body, "reference_batch", f"{where}.reference_batch", fail)
    if batch.value != int(batch.value):
        raise fail("must be a whole number", f"{where}.reference_batch")
    grad = _figure(body, "gradient_bytes", f"{where}.gradient_bytes", fail)
    bwd = _figure(body, "backward_fraction", f"{where}.backward_fraction", fail)
    if bwd.value > 1.0:
        raise fail(f"must be in (0, 1], got {bwd.value}", f"{where}.backward_fraction")
    act = _figure(body, "activation_bytes", f"{where}.activation_bytes", fail)
    for key, fig in (("reference_batch", batch), ("gradient_bytes", grad), ("backward_fraction", bwd),
                     ("activation_bytes", act)):
        sources[key] = fig.source
    compute_doc = body.get("compute_s")
    if not isinstance(compute_doc, dict) or not compute_doc:
        raise fail("must be a table of GPU type -> { value, source }", f"{where}.compute_s")
    compute: dict[str, float] = {}
    for gpu in compute_doc:
        fig = _figure(compute_doc, gpu, f"{where}.compute_s.{gpu}", fail)
        compute[gpu] = fig.value
        sources[f"compute_s.{gpu}"] = fig.source
    data: DataProfile | None = None
    data_doc = body.get("data")
    if data_doc is not None:
        if not isinstance(data_doc, dict):
            raise fail("must be a table", f"{where}.data")
        for key in data_doc:
            if key not in _DATA_KEYS:
                raise fail(f"unknown key (allowed: {', '.join(sorted(_DATA_KEYS))})", f"{where}.data.{key}")
        figs = {key: _figure(data_doc, key, f"{where}.data.{key}", fail) for key in sorted(_DATA_KEYS)}
        if figs["best_speedup"].value < 1.0:
            raise fail("must be >= 1 (the best demand is never slower than the proportional share)",
                       f"{where}.data.best_speedup")
        data = DataProfile(best_cpus=figs["best_cpus"].value, best_memory_gb=figs["best_memory_gb"].value,
                           best_speedup=figs["best_speedup"].value)
        sources.update({f"data.{key}": fig.source for key, fig in figs.items()})
    split: dict[str, float] = {}
    for key in ("layers", "layer_output_bytes", "moe_layers", "experts", "expert_fraction"):  # optional: plans, MoE
        if key in body:
            fig = _figure(body, key, f"{where}.{key}", fail)
            split[key], sources[key] = fig.value, fig.source
    for key in ("layers", "moe_layers", "experts"):
        if split.get(key, 1.0) != int(split.get(key, 1.0)):
            raise fail("must be a whole number", f"{where}.{key}")
    if split.get("moe_layers", 0) > split.get("layers", 0) or (split.get("moe_layers", 0)
                                                                 and not split.get("layer_output_bytes")):
        raise fail(f"{int(split['moe_layers'])} MoE layers need as many layers and a layer_output_bytes "
                   f"(the tokens an all-to-all moves); got {int(split.get('layers', 0))} layers",
                   f"{where}.moe_layers")
    if ("experts" in split) != ("expert_fraction" in split) or ("experts" in split and (
            not split.get("moe_layers") or split["experts"] < 2 or split["expert_fraction"] >= 1.0)):
        raise fail("experts (>= 2) and expert_fraction (< 1) go together, on a model with moe_layers",
                   f"{where}.experts")
    missing = [g for g in required if g not in compute]
    if missing:
        raise fail(f"missing required GPU types {', '.join(missing)} "
                   f"(every model needs {', '.join(required)})", f"{where}.compute_s")
    return ModelProfile(
        name=name, task=task, description=description, reference_batch=int(batch.value),
        gradient_bytes=grad.value, backward_fraction=bwd.value,
        compute_s=MappingProxyType(compute), sources=MappingProxyType(sources),
        activation_bytes=act.value, data=data, layers=int(split.get("layers", 0)),
        layer_output_bytes=split.get("layer_output_bytes", 0.0), moe_layers=int(split.get("moe_layers", 0)),
        experts=int(split.get("experts", 0)), expert_fraction=split.get("expert_fraction", 0.0),
    )


def _table(doc: dict[str, Any], key: str, fail: Any) -> dict[str, Any]:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise fail("is required and must be a table", key)
    return value


def _figure(table: dict[str, Any], key: str, field: str, fail: Any, *, allow_zero: bool = False) -> Figure:
    if key not in table:
        raise fail("is required", field)
    raw = table[key]
    if not isinstance(raw, dict) or set(raw) != {"value", "source"}:
        raise fail("must be { value = <number>, source = \"<where it comes from>\" }", field)
    value, src = raw["value"], raw["source"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fail(f"value must be a finite number, got {value!r}", field)
    if value < 0 or (value == 0 and not allow_zero):
        raise fail(f"value must be {'>= 0' if allow_zero else 'positive'}, got {value!r}", field)
    if not isinstance(src, str) or not src.strip():
        raise fail("every figure needs a non-empty source", field)
    return Figure(float(value), src.strip())


def _line_of(lines: list[str], field: str) -> int | None:
    """Best-effort line of a dotted field: its ``key =`` line under the nearest table header."""
    parts = field.split(".")
    for depth in range(len(parts), 0, -1):
        header = "[" + ".".join(_quote(p) for p in parts[:depth]) + "]"
        start = next((i for i, raw in enumerate(lines) if raw.strip() == header), None)
        if start is None:
            continue
        rest = ".".join(_quote(p) for p in parts[depth:])
        for j in range(start + 1, len(lines)):
            text = lines[j].strip()
            if text.startswith("["):
                break
            if rest and (text.startswith(f"{rest} ") or text.startswith(f"{rest}=")
                         or text.startswith(f"{_quote(parts[depth])}.")):
                return j + 1
        return start + 1
    return next((i + 1 for i, raw in enumerate(lines) if raw.strip().startswith(f"{parts[0]} ")), None)


def _quote(part: str) -> str:
    return part if re.match(r"^[A-Za-z0-9_]+$", part) else f'"{part}"'
