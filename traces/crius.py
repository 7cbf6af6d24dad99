"""Crius' trace adaptation (papers/crius-cell-scheduling.txt §8.1, "Workloads").

"While each job record consists of job id, submission time and duration, we randomly generate
the GPU amount and GPU type to adapt traces to heterogeneous scenarios. The number of iterations
in Philly trace is calculated from scaling by global batch size." :func:`adapt_for_crius` does
this for any loaded trace, seeded and order-independent (:mod:`halyard.traces.assign`):

* **Model**: the family ``families[floor(H(seed, key, 0) x len(families))]`` with ``key =
  text_key("crius:" + job_id)``, of Crius' Table 2 (Wide-ResNet, BERT, GShard MoE:
  :data:`CRIUS_FAMILIES`), at the size for the job's ``N_G`` (:data:`CRIUS_FAMILIES` maps ``N_G``
  to a size). Crius does not say how it pairs sizes with GPU amounts ("We increase the model size
  as the number of GPUs increases", Fig. 12); the pairing is Alpa's weak-scaling benchmark, which
  Table 2's models come from (the GPT suite runs 760M on 2 GPUs, 1.3B on 4, 2.6B on 8, 6.7B on 16;
  Wide-ResNet 500M on 2, 1B on 4, 2B on 8, 4B on 16; MoE 690M on 2, 1.3B on 4, 2.4B on 8, 10B on 16
  [code alpa-projects/alpa benchmark/alpa suite_auto_gpt.py, suite_wresnet.py]), with 1 GPU taking
  the smallest Table 2 size. ``models`` (a tuple of catalog names) replaces the families: each job
  takes one of them whatever its ``N_G`` (the older adaptation).
* **GPU amount** ``N_G``: ``choices[floor(H(seed, key, 1) x len(choices))]`` over
  :data:`CRIUS_GPU_CHOICES` (the paper does not give its distribution: powers of two up to 8
  GPUs, uniform, is ours). The job becomes elastic over ``N_G/2 .. 2 N_G`` (§6.1's Cells).
* **GPU type**: ``gpu_types`` (a function of the adapted job: the types its request may name, e.g.
  those its data-parallel worker fits on the target cluster) draws one,
  ``types[floor(H(seed, key, 2) x len(types))]``, as the job's ``gpu_type`` ("we randomly generate the
  GPU amount and GPU type"); without it (the types depend on the cluster) the job runs on any type.
  Who honours the type is the caller's reading (benchmarks/reproduce_crius.py, which draws it by
  default: the heterogeneity-unaware baselines run on it, Gavel and Crius choose).
* **Iterations**: a job keeps the samples it trained in the trace, so its iterations scale by the
  global batch size ("The number of iterations in Philly trace is calculated from scaling by global
  batch size"): at the same per-GPU batch, ``N_G`` GPUs train ``N_G / old GPUs`` times the global
  batch per iteration. A job that gives iterations gets ``iterations x old GPUs / N_G``; one that
  gives a duration gets ``duration x old GPUs / N_G`` (``iterations`` left at 0, so the core
  converts that run time at ``N_G`` GPUs, global batch ``N_G x`` the model's reference batch):
  the trace's GPU time is kept, whatever ``N_G`` is drawn.
  ``keep_duration=True`` (the first adaptation, ours, off by default) keeps a Philly duration as the
  run time at ``N_G`` GPUs instead, so a job's work grows with its drawn ``N_G``: the bundled 6-hour
  window then offers 2,579 GPU-hours to a 64-GPU cluster (40 cluster-hours in 6) against 706 as
  the trace ran them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from halyard.datamodel import JobSpec, ValidationError
from halyard.traces.assign import text_key, uniform

# Crius Table 2's families, each N_G -> the catalog model of that size (module docstring: Alpa's pairing).
CRIUS_FAMILIES: tuple[dict[int, str], ...] = (
    {1: "wresnet-0.5b", 2: "wresnet-0.5b", 4: "wresnet-1b", 8: "wresnet-2b", 16: "wresnet-4b", 32: "wresnet-6.8b"},
    {1: "bert-0.76b", 2: "bert-0.76b", 4: "bert-1.3b", 8: "bert-2.6b", 16: "bert-6.7b"},
    {1: "moe-0.69b", 2: "moe-0.69b", 4: "moe-1.3b", 8: "moe-2.4b", 16: "moe-10b", 32: "moe-27b"},
)
# The stand-ins of the first adaptation (no Table 2 model in the catalog then), kept for ``models=``.
CRIUS_MODELS: tuple[str, ...] = ("bert-large", "transformer-xl", "resnet50")
CRIUS_GPU_CHOICES: tuple[int, ...] = (1, 2, 4, 8)


def adapt_for_crius(jobs: Sequence[JobSpec], *, seed: int = 0, models: Sequence[str] | None = None,
                    gpu_choices: Sequence[int] = CRIUS_GPU_CHOICES,
                    deadline_factor: tuple[float, float] | None = None,
                    keep_duration: bool = False,
                    gpu_types: Callable[[JobSpec], Sequence[str]] | None = None) -> list[JobSpec]:
    """The jobs with a drawn model and elastic GPU amount (module docstring), in the same order.

    ``deadline_factor`` ``(lo, hi)`` also gives each job with a duration the deadline
    ``submit + lam x duration_s``, ``lam = lo + H(seed, key', 0) x (hi - lo)`` with
    ``key' = text_key("crius-deadline:" + job_id)``: ElasticFlow's (and Crius-DDL's, §8.5) deadlines
    scale with the job's run time at ``N_G`` GPUs; the range is the caller's (Crius does not give it).
    ``keep_duration``: the module docstring's older reading of a duration (ours, off by default).
    ``gpu_types``: draw each job's requested GPU type among ``gpu_types(job)`` (module docstring); a job
    for which it names none is refused here, not left to fail at submission."""
    if (models is not None and not models) or not gpu_choices or min(gpu_choices) < 1:
        raise ValidationError("models and gpu_choices must be non-empty, GPU amounts >= 1", field="gpu_choices")
    if models is None and any(n not in f for f in CRIUS_FAMILIES for n in gpu_choices):
        raise ValidationError(f"gpu_choices {tuple(gpu_choices)}: Table 2's families have sizes for "
                              f"{sorted(set.intersection(*(set(f) for f in CRIUS_FAMILIES)))} GPUs only",
                              field="gpu_choices")
    if deadline_factor is not None and not 0 < deadline_factor[0] <= deadline_factor[1]:
        raise ValidationError(f"deadline_factor must be 0 < lo <= hi, got {deadline_factor}", field="deadline_factor")
    keys = [text_key("crius:" + j.job_id) for j in jobs]
    u_model, u_gpus, u_type = uniform(seed, keys, 0), uniform(seed, keys, 1), uniform(seed, keys, 2).tolist()
    u_deadline = uniform(seed, [text_key("crius-deadline:" + j.job_id) for j in jobs], 0).tolist()
    out = []
    for job, um, ug, ud in zip(jobs, u_model.tolist(), u_gpus.tolist(), u_deadline, strict=True):
        n = gpu_choices[int(ug * len(gpu_choices))]
        iterations = max(1, round(job.iterations * job.num_gpus / n)) if job.iterations else 0
        duration = job.duration_s if keep_duration or not job.duration_s else job.duration_s * job.num_gpus / n
        deadline = job.deadline
        if deadline_factor is not None and duration:
            lo, hi = deadline_factor
            deadline = job.submit_time + (lo + ud * (hi - lo)) * duration
        model = (models[int(um * len(models))] if models is not None
                 else CRIUS_FAMILIES[int(um * len(CRIUS_FAMILIES))][n])
        out.append(replace(job, model=model, num_gpus=n, min_gpus=max(1, n // 2),
                           max_gpus=2 * n, gpu_type=None, batch_size=0, parallelism=None, logical_workers=0,
                           iterations=iterations, duration_s=duration, deadline=deadline))
    if gpu_types is not None:
        for i, (job, ut) in enumerate(zip(out, u_type, strict=True)):
            types = list(gpu_types(job))
            if not types:
                raise ValidationError(f"job {job.job_id!r} ({job.model} on {job.num_gpus} GPUs): gpu_types names "
                                      f"no GPU type for it", field="gpu_types")
            out[i] = replace(job, gpu_type=types[int(ut * len(types))])
    return out
