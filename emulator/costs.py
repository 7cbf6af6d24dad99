"""What changing a job's GPUs costs: checkpoints, restarts and reconfigurations, and EasyScale's
time-sliced steps of elastic trainers (ESTs) on a heterogeneous placement.

A part of :class:`~halyard.emulator.PerformanceModel`; the pure formulas are
:mod:`halyard.emulator.elastic`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from halyard.datamodel import JobSpec
from halyard.emulator.collectives import GBYTE
from halyard.emulator.compute import ComputeTime
from halyard.emulator.elastic import est_step_s


class ReconfigurationCosts:
    """Seconds a job loses when it starts, stops, moves or resizes. ``start_cost_s`` and ``resize_cost_s``
    are :class:`~halyard.emulator.PerformanceModel`'s options towards EasyScale's public simulator."""

    def __init__(self, compute: ComputeTime, *, start_cost_s: float, resize_cost_s: float | None) -> None:
        self._compute = compute
        self.start_cost_s = start_cost_s
        self._resize_cost_s = resize_cost_s

    def checkpoint_bytes(self, model: str) -> float:
        """Weights and optimizer state: ``gradient_bytes x checkpoint_state_factor``."""
        return self._compute.profile(model).gradient_bytes * self._compute.catalog.constants.checkpoint_state_factor

    def checkpoint_s(self, spec: JobSpec) -> float:
        """Writing an on-demand checkpoint at ``checkpoint_gbyte_s`` (the read bandwidth; estimate)."""
        return self.checkpoint_bytes(spec.model) / (self._compute.catalog.constants.checkpoint_gbyte_s * GBYTE)

    def restore_s(self, spec: JobSpec) -> float:
        """Reading the checkpoint back: ``checkpoint_bytes / checkpoint_gbyte_s``."""
        return self.checkpoint_bytes(spec.model) / (self._compute.catalog.constants.checkpoint_gbyte_s * GBYTE)

    def restart_cost_s(self, spec: JobSpec) -> float:
        """Seconds a preempted job loses on restart: fixed relaunch + checkpoint read.

        ``restart_fixed_s + gradient_bytes x checkpoint_state_factor / checkpoint_gbyte_s``.
        """
        c = self._compute.catalog.constants
        state_bytes = self._compute.profile(spec.model).gradient_bytes * c.checkpoint_state_factor
        return c.restart_fixed_s + state_bytes / (c.checkpoint_gbyte_s * GBYTE)

    def reconfigure_cost_s(self, spec: JobSpec) -> float:
        """A migration or resize: checkpoint on demand, then restart (EasyScale §3.2); ``resize_cost_s``
        instead when the model was built with it."""
        if self._resize_cost_s is not None:
            return self._resize_cost_s
        return self.checkpoint_s(spec) + self.restart_cost_s(spec)

    def est_step_s(self, spec: JobSpec, placement: Sequence[tuple[str, int]],
                   allreduce_exposed_s: float = 0.0) -> float:
        """EasyScale: one global step of ESTs time-sliced on ``placement`` = [(GPU type, ESTs), ...].

        Each EST computes the job's per-GPU batch (``ideal_iteration_time`` on its GPU
        type); gradient copies run at ``gradient_copy_gbyte_s`` behind the next EST
        (:func:`halyard.emulator.elastic.est_step_s`).
        """
        copy = (self._compute.profile(spec.model).gradient_bytes
                / (self._compute.catalog.constants.gradient_copy_gbyte_s * GBYTE))
        return est_step_s([self._compute.ideal_iteration_time(spec, g) for g, _ in placement],
                          [a for _, a in placement], [copy] * len(placement), allreduce_exposed_s)

    def est_capability(self, spec: JobSpec, gpu_type: str) -> float:
        """EasyScale's ``C_i``: mini-batches per second of one EST on ``gpu_type``."""
        return 1.0 / self._compute.ideal_iteration_time(spec, gpu_type)
