"""Tiresias (Gu et al., NSDI'19), the baseline Dally is measured against (Dally §3.2, §3.4, §5.1.3).

* **Discretised 2D-LAS** (:class:`TwoDimensionalLas`, an ordering stage). A job's
  attained service is GPU-seconds (executed time x GPUs). Queues are cut at
  ``thresholds`` (GPU-seconds): a job starts in queue 0 and is demoted to queue
  k+1 once its service reaches ``thresholds[k]``. Lower queues go first; inside
  a queue, jobs go in arrival order (FIFO). Preemptive: running jobs of a later
  queue make way for earlier-queue jobs at each pass. The reference simulator
  effectively uses two queues with a first threshold of 3,250 GPU-seconds
  (REFERENCE-NUMBERS, [code SymbioticLab/Tiresias]), the default here.
* **Starvation promotion** (optional, off by default as in the reference): a
  waiting job whose current wait has reached ``starvation_knob`` x its executed
  time goes back to queue 0, and its service for demotion counts from then.
* **Skew-based consolidation** (:class:`SkewConsolidation`, a placement stage).
  Models whose largest tensor is a large share of the model (high skew) are
  consolidated strictly: on the fewest machines that can hold them, or not at
  all (the job waits). Other jobs take any free GPUs, network-agnostically
  (first fit in node order): "jobs with high skew are consolidated into as few
  machines as possible, while others are left unconsolidated" (Dally §1).

Queue membership is policy state, kept per job id in the ordering instance and
updated from the view at every pass, so it is a function of the views seen.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping

from halyard.datamodel import Allocation
from halyard.policies.placement import FirstFitConsolidated, build_allocation, choose_nodes, usable_gpus
from halyard.policies.resources import FreeResources
from halyard.policies.topology import first_fit
from halyard.policies.view import ClusterView, JobInfo

# REFERENCE-NUMBERS, Tiresias baseline parameters: the reference simulator effectively uses
# two queues, the first up to 3,250 GPU-seconds.
TIRESIAS_THRESHOLDS_GPU_S: tuple[float, ...] = (3250.0,)

# Largest tensor / model size. REFERENCE-NUMBERS "Tensor skew" [code SymbioticLab/Tiresias models.py].
TENSOR_SKEW: Mapping[str, float] = {
    "vgg19": 0.72, "vgg16": 0.74, "vgg11": 0.77, "alexnet": 0.61, "resnet50": 0.11,
    "resnet101": 0.08, "resnet152": 0.06, "inception3": 0.14, "inception4": 0.04,
}
# Dally Table 1's Skew column for its models that Tiresias' table lacks (High / Low).
TABLE1_HIGH_SKEW: Mapping[str, bool] = {"mobilenetv3": True, "resnet18": False, "bert-large": False}
# Estimate: every measured skew is <= 0.14 or >= 0.61; any cut between them classifies the same.
SKEW_THRESHOLD = 0.5


def high_skew(model: str, skew: Mapping[str, float] = TENSOR_SKEW,
              labels: Mapping[str, bool] = TABLE1_HIGH_SKEW, threshold: float = SKEW_THRESHOLD) -> bool:
    """Whether Tiresias consolidates ``model`` strictly; unknown models are treated as low skew."""
    if model in skew:
        return skew[model] >= threshold
    return labels.get(model, False)


class TwoDimensionalLas:
    """Discretised 2D-LAS with optional starvation promotion (an :class:`~halyard.policies.stages.Ordering`)."""

    name = "tiresias-2das"
    preemptive = True
    needs_rounds = True  # service accrues with time alone
    arrival_order = False

    def __init__(self, thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS_GPU_S,
                 starvation_knob: float | None = None) -> None:
        if any(b <= a for a, b in itertools.pairwise(thresholds)) or any(t <= 0 for t in thresholds):
            raise ValueError(f"thresholds must be positive and increasing, got {thresholds}")
        if starvation_knob is not None and starvation_knob <= 0:
            raise ValueError(f"starvation_knob must be positive, got {starvation_knob}")
        self.thresholds = thresholds
        self.starvation_knob = starvation_knob
        self._queue: dict[str, int] = {}
        self._baseline: dict[str, float] = {}  # attained service when last promoted

    def queue_of(self, job: JobInfo, now: float) -> int:
        """The job's queue at ``now`` after any promotion and demotion (and remember it)."""
        job_id = job.job_id
        queue = self._queue.get(job_id, 0)
        attained = job.attained_gpu_s(now)
        if self.starvation_knob is not None and queue > 0 and job.allocation is None:
            executed = job.run_time_s(now)
            if now - job.pending_since >= self.starvation_knob * executed:
                queue = 0
                self._baseline[job_id] = attained
        service = attained - self._baseline.get(job_id, 0.0)
        while queue < len(self.thresholds) and service >= self.thresholds[queue]:
            queue += 1
        self._queue[job_id] = queue
        return queue

    def key(self, view: ClusterView) -> Callable[[JobInfo], tuple[int, float, int]]:
        now = view.now
        return lambda job: (self.queue_of(job, now), job.spec.submit_time, job.arrival_seq)


class SkewConsolidation:
    """Strict consolidation for high-skew models, any free GPUs for the others (a placement stage)."""

    name = "tiresias-skew"

    def __init__(self, is_high_skew: Callable[[str], bool] = high_skew) -> None:
        self.is_high_skew = is_high_skew
        self._shapes = FirstFitConsolidated()

    def place(self, view: ClusterView, job: JobInfo, gpus: int, free: FreeResources) -> Allocation | None:
        shape = self._shapes.shape(free.cluster)
        types = view.gpu_types_for(job.spec)
        avail = usable_gpus(free, shape, types)
        if self.is_high_skew(job.spec.model):
            picked = choose_nodes(avail, shape, gpus)
            fewest = math.ceil(gpus / max(shape.max_gpus_per_node(types), 1))
            if picked is None or len(picked) > fewest:
                return None
        else:
            picked = first_fit(avail, gpus)
        return None if picked is None else build_allocation(free, picked)
