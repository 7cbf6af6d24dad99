"""Crius' trace adaptation (papers/crius-cell-scheduling.txt §8.1, "Workloads").

"While each job record consists of job id, submission time and duration, we randomly generate
the GPU amount and GPU type to adapt traces to heterogeneous scenarios. The number of iterations
in Philly trace is calculated from scaling by global batch size." :func:`adapt_for_crius` does
this for any loaded trace, seeded and order-independent (:mod:`halyard.traces.assign`):

* **Model**: ``models[floor(H(seed, key, 0) x len(models))]`` with ``key = text_key("crius:" +
  job_id)``. Crius runs Wide-ResNet, BERT and GShard MoE (Table 2); the catalog's stand-ins are
  :data:`CRIUS_MODELS` (BERT-large for BERT, Transformer-XL for a second transformer, ResNet-50
  for the ResNet family). A substitution: the catalog has no Wide-ResNet or MoE figures.
* **GPU amount** ``N_G``: ``choices[floor(H(seed, key, 1) x len(choices))]`` over
  :data:`CRIUS_GPU_CHOICES` (the paper does not give its distribution: powers of two up to 8
  GPUs, uniform, is ours). The job becomes elastic over ``N_G/2 .. 2 N_G`` (§6.1's Cells).
* **GPU type**: not drawn as a constraint; Crius moves jobs across types, and a drawn type would
  pin FCFS and the other baselines to it. The job runs on any type.
* **Iterations**: a job that gives a duration keeps it and leaves ``iterations`` at 0, so the
  core converts it at ``N_G`` GPUs (global batch ``N_G x`` the model's reference batch); a job
  that gives iterations keeps its samples: ``iterations x old GPUs / N_G`` (same per-GPU batch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from halyard.datamodel import JobSpec, ValidationError
from halyard.traces.assign import text_key, uniform

CRIUS_MODELS: tuple[str, ...] = ("bert-large", "transformer-xl", "resnet50")
CRIUS_GPU_CHOICES: tuple[int, ...] = (1, 2, 4, 8)


def adapt_for_crius(jobs: Sequence[JobSpec], *, seed: int = 0, models: Sequence[str] = CRIUS_MODELS,
                    gpu_choices: Sequence[int] = CRIUS_GPU_CHOICES,
                    deadline_factor: tuple[float, float] | None = None) -> list[JobSpec]:
    """The jobs with a drawn model and elastic GPU amount (module docstring), in the same order.

    ``deadline_factor`` ``(lo, hi)`` also gives each job with a duration the deadline
    ``submit + lam x duration_s``, ``lam = lo + H(seed, key', 0) x (hi - lo)`` with
    ``key' = text_key("crius-deadline:" + job_id)``: ElasticFlow's (and Crius-DDL's, §8.5) deadlines
    scale with the job's run time; the range is the caller's (Crius does not give it)."""
    if not models or not gpu_choices or min(gpu_choices) < 1:
        raise ValidationError("models and gpu_choices must be non-empty, GPU amounts >= 1", field="gpu_choices")
    if deadline_factor is not None and not 0 < deadline_factor[0] <= deadline_factor[1]:
        raise ValidationError(f"deadline_factor must be 0 < lo <= hi, got {deadline_factor}", field="deadline_factor")
    keys = [text_key("crius:" + j.job_id) for j in jobs]
    u_model, u_gpus = uniform(seed, keys, 0), uniform(seed, keys, 1)
    u_deadline = uniform(seed, [text_key("crius-deadline:" + j.job_id) for j in jobs], 0).tolist()
    out = []
    for job, um, ug, ud in zip(jobs, u_model.tolist(), u_gpus.tolist(), u_deadline, strict=True):
        n = gpu_choices[int(ug * len(gpu_choices))]
        iterations = max(1, round(job.iterations * job.num_gpus / n)) if job.iterations else 0
        deadline = job.deadline
        if deadline_factor is not None and job.duration_s:
            lo, hi = deadline_factor
            deadline = job.submit_time + (lo + ud * (hi - lo)) * job.duration_s
        out.append(replace(job, model=models[int(um * len(models))], num_gpus=n, min_gpus=max(1, n // 2),
                           max_gpus=2 * n, gpu_type=None, batch_size=0, parallelism=None, logical_workers=0,
                           iterations=iterations, deadline=deadline))
    return out
