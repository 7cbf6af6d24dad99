"""The protocol policies see (``PerformanceEstimator``) is complete, and the facade that the
simulator and the agents build (``PerformanceModel``) implements it with the same signatures.

A policy calling a method the protocol does not declare would run (the object is the facade) but
escape the type checker and any other estimator; these tests fail on the first such call."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from halyard.emulator import PerformanceModel
from halyard.emulator.compute import ComputeTime
from halyard.emulator.costs import ReconfigurationCosts
from halyard.emulator.iteration_time import IterationTimeModel
from halyard.emulator.memory import MemoryModel
from halyard.emulator.plan_search import PlanSearch
from halyard.policies import PerformanceEstimator

POLICIES = Path(__file__).resolve().parents[1] / "policies"


def _declared() -> set[str]:
    return {name for name, _ in inspect.getmembers(PerformanceEstimator, inspect.isfunction)
            if not name.startswith("_")}


def _called_on_perf() -> dict[str, list[str]]:
    """Method name -> 'file:line' of every call ``<...>.perf.NAME(...)`` or ``perf.NAME(...)`` in policies/."""
    out: dict[str, list[str]] = {}
    for path in sorted(POLICIES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            owner = node.func.value
            if (isinstance(owner, ast.Name) and owner.id == "perf") or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "perf"):
                out.setdefault(node.func.attr, []).append(f"{path.name}:{node.lineno}")
    return out


def test_policies_call_only_declared_methods() -> None:
    called = _called_on_perf()
    assert called, "the scan found no calls: it no longer sees how policies reach the model"
    undeclared = {name: where for name, where in called.items() if name not in _declared()}
    assert not undeclared, f"policies call PerformanceEstimator methods it does not declare: {undeclared}"


def test_the_model_implements_every_declared_method_with_its_signature() -> None:
    for name in sorted(_declared()):
        implemented = getattr(PerformanceModel, name, None)
        assert implemented is not None, f"PerformanceModel lacks {name}"
        declared = inspect.signature(getattr(PerformanceEstimator, name))
        assert list(inspect.signature(implemented).parameters) == list(declared.parameters), name


def test_the_facade_answers_what_its_parts_answer() -> None:
    """Each part stands alone: built from the same catalog, it gives the facade's figures."""
    from halyard.datamodel import JobSpec, load_cluster

    pm = PerformanceModel()
    cluster = load_cluster("default")
    spec = JobSpec(job_id="j", submit_time=0.0, model="resnet50", num_gpus=4, iterations=10)
    compute = ComputeTime(pm.catalog)
    memory = MemoryModel(compute)
    timing = IterationTimeModel(compute, allreduce="ring", overlap="ddp", data_stalls=False, communication=True)
    gpu = cluster.gpu_types[0]
    assert compute.ideal_iteration_time(spec, gpu) == pm.ideal_iteration_time(spec, gpu)
    assert memory.memory_footprint(spec, gpu) == pm.memory_footprint(spec, gpu)
    assert PlanSearch(compute, memory).runs_on(spec, gpu, 4) == pm.runs_on(spec, gpu, 4)
    assert timing.consolidated_iteration_time(spec, cluster) == pm.consolidated_iteration_time(spec, cluster)
    costs = ReconfigurationCosts(compute, start_cost_s=0.0, resize_cost_s=None)
    assert costs.reconfigure_cost_s(spec) == pm.reconfigure_cost_s(spec) > 0.0
