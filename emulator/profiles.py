"""Model profiles as rows of (field, value, unit, source): what `halyard profiles` prints.

`profile_rows(pm, model)` lists every number the performance model holds for a
model -- the catalog's figures with their sources, the GPU types filled in by the
scaling rule (marked as estimates), the memory footprint per GPU type at the
reference batch (with the micro-batches it needs where it only fits in them) and the
data-stall summary -- and `format_profile` renders them as text. `list_rows(pm)`
is one line per model. The CLI (`halyard profiles list|show MODEL`) only has to
print these.
"""

from __future__ import annotations

from dataclasses import dataclass

from halyard.datamodel import JobSpec
from halyard.emulator.performance import PerformanceModel


@dataclass(frozen=True, slots=True)
class ProfileRow:
    field: str
    value: float | str
    unit: str
    source: str

    @property
    def estimated(self) -> bool:
        return self.source.lower().startswith("estimate")


def profile_rows(pm: PerformanceModel, model: str) -> list[ProfileRow]:
    """Every figure of ``model`` with its unit and source (KeyError for an unknown model)."""
    p = pm.profile(model)
    rows = [
        ProfileRow("task", p.task, "", p.description or "catalog"),
        ProfileRow("reference_batch", p.reference_batch, "samples per GPU", p.sources["reference_batch"]),
        ProfileRow("gradient_bytes", p.gradient_bytes, "B", p.sources["gradient_bytes"]),
        ProfileRow("parameters", p.parameters, "", "gradient_bytes / 4 (fp32 gradients)"),
        ProfileRow("backward_fraction", p.backward_fraction, "", p.sources["backward_fraction"]),
        ProfileRow("activation_bytes", p.activation_bytes, "B at reference_batch", p.sources["activation_bytes"]),
    ]
    if p.layers:  # tensor / pipeline plans (halyard.emulator.parallel)
        rows += [ProfileRow("layers", p.layers, "", p.sources["layers"]),
                 ProfileRow("layer_output_bytes", p.layer_output_bytes, "B per sample",
                            p.sources["layer_output_bytes"])]
    for gpu in sorted(p.compute_s, key=lambda g: -p.compute_s[g]):
        rows.append(ProfileRow(f"compute_s.{gpu}", p.compute_s[gpu], "s per iteration", p.sources[f"compute_s.{gpu}"]))
    spec = JobSpec(job_id="profile", submit_time=0.0, model=model, num_gpus=1, iterations=1)
    c = pm.catalog.constants
    for gpu in pm.gpu_types():
        f = pm.memory_footprint(spec, gpu)  # at the reference batch: micro-batches where it needs them
        fits = "fits" if f.fits else "does not fit"
        split = "" if f.micro_batches == 1 else f" in {f.micro_batches} micro-batches"
        rows.append(ProfileRow(
            f"memory.{gpu}", f.total_bytes, f"B per GPU ({fits} {f.capacity_bytes / 1e9:.0f} GB{split})",
            f"state {c.state_bytes_per_parameter:g} B/param + activations{' of one micro-batch' if split else ''} "
            f"+ reserve "
            f"(docs/performance-model.md, Memory)"))
    if p.data is not None:
        for key in ("best_cpus", "best_memory_gb", "best_speedup"):
            rows.append(ProfileRow(f"data.{key}", getattr(p.data, key), "", p.sources[f"data.{key}"]))
    else:
        rows.append(ProfileRow("data", "flat", "", "no Synergy CPU/memory profile: not input-bound"))
    restart = pm.restart_cost_s(spec)
    rows.append(ProfileRow("restart_cost_s", restart, "s", "restart_fixed_s + checkpoint_bytes / checkpoint_gbyte_s"))
    return rows


def format_profile(pm: PerformanceModel, model: str) -> str:
    """A text table of :func:`profile_rows`; estimates are marked ``*``."""
    lines = [f"{model}"]
    for r in profile_rows(pm, model):
        value = f"{r.value:.4g}" if isinstance(r.value, float) else str(r.value)
        mark = "*" if r.estimated else " "
        lines.append(f"  {r.field:24} {value:>12}{mark} {r.unit:44} {r.source}")
    lines.append("  (* estimate)")
    return "\n".join(lines)


def list_rows(pm: PerformanceModel) -> list[tuple[str, str, int, float, float]]:
    """(model, task, reference batch, gradient MB, V100 ms per iteration) per catalog model."""
    out = []
    for name in pm.models():
        p = pm.profile(name)
        out.append((name, p.task, p.reference_batch, p.gradient_bytes / 1e6, 1e3 * p.compute_s["V100"]))
    return out
