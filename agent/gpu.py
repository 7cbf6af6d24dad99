"""The gpu backend: the process backend plus NVML discovery and health.

``halyard agent --backend gpu`` runs jobs exactly as ``--backend process``
does (:mod:`halyard.agent.process`) and adds, through NVML (the
``nvidia-ml-py`` package, imported only here and only when this backend is
chosen; install it with ``pip install 'halyard[gpu]'``):

* discovery: the number and type of the node's GPUs and their memory, sent in
  Register (a node not named in a cluster file is described from NVML);
* per job, ``CUDA_VISIBLE_DEVICES`` set to the GPU indices of the job's share of
  this node (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, so CUDA numbers GPUs as NVML does);
* health in every heartbeat: mean GPU utilisation, and unhealthy when a GPU
  reports volatile uncorrectable ECC errors or a critical Xid event, with the
  reason in ``detail`` next to each GPU's utilisation and memory.

Without NVML the agent refuses to start and says why (:class:`GpuUnavailable`):
a GPU agent that cannot see its GPUs would hand out devices it cannot check.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Unpack

import structlog

from halyard.agent.process import Enforcement, ProcessAgent, ProcessJob, ProcessOptions
from halyard.agent.profiling import refused
from halyard.clock import Clock
from halyard.datamodel import HalyardError, Node
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1.types_pb2 import NodeSpec

log = structlog.get_logger("halyard.agent")

VERSION = "halyard-gpu/1"
KNOWN_TYPES = ("H200", "H100", "A100", "A10G", "A10", "A40", "A30", "L40S", "L40", "L4", "V100", "P100", "T4", "B200")


class GpuUnavailable(HalyardError):
    """The gpu backend cannot run on this machine; the message says why."""


def load_nvml() -> ModuleType:
    """The initialised ``pynvml`` module, or :class:`GpuUnavailable` naming what is missing."""
    try:
        import pynvml
    except ImportError:
        raise GpuUnavailable("the gpu backend needs NVML through the nvidia-ml-py package, which is not installed "
                             "(pip install 'halyard[gpu]'); use --backend process to run jobs without GPUs") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and its many subclasses
        raise GpuUnavailable(f"the gpu backend needs NVML, and NVML did not start: {exc} (is the NVIDIA driver "
                             "installed and a GPU visible to this process?)") from None
    return pynvml


def gpu_type_of(name: str) -> str:
    """``NVIDIA H200`` -> ``H200``, ``Tesla V100-SXM2-32GB`` -> ``V100``; else the name without spaces."""
    upper = name.upper()
    for known in KNOWN_TYPES:
        if re.search(rf"(?<![A-Z0-9]){known}(?![0-9])", upper):
            return known
    return re.sub(r"\s+", "-", name.strip())


def local_gpus(nvml: ModuleType | None = None) -> tuple[str, int]:
    """This machine's GPU type (from GPU 0's name) and GPU count, through NVML."""
    nvml = nvml or load_nvml()
    return gpu_type_of(_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(0)))), nvml.nvmlDeviceGetCount()


class GpuAgent(ProcessAgent):
    """``halyard agent --backend gpu``; raises :class:`GpuUnavailable` without NVML or GPUs."""

    backend = "gpu"
    version = VERSION

    def __init__(self, target: str, node: Node | str, *, work_dir: str | Path, shared_clock: Clock | None = None,
                 hosts: dict[str, str] | None = None, enforcement: Enforcement | None = None,
                 nvml: ModuleType | None = None, **process: Unpack[ProcessOptions]) -> None:
        self.nvml = nvml or load_nvml()
        count = self.nvml.nvmlDeviceGetCount()
        if count == 0:
            raise GpuUnavailable("NVML sees no GPU on this machine")
        self.handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        names = [_text(self.nvml.nvmlDeviceGetName(h)) for h in self.handles]
        self.gpu_type = gpu_type_of(names[0])
        self.memory_mb = [int(self.nvml.nvmlDeviceGetMemoryInfo(h).total) // 1_000_000 for h in self.handles]
        if isinstance(node, Node) and node.gpus != count:
            log.warning("the cluster file and NVML disagree on this node's GPUs", node=node.name,
                        cluster_file=node.gpus, nvml=count)
        self._xid_set = self._watch_xid()
        self._faults: list[str] = []
        super().__init__(target, node, work_dir=work_dir, shared_clock=shared_clock, hosts=hosts,
                         enforcement=enforcement, **process)
        log.info("gpus discovered", node=self.node_name, gpus=count, type=self.gpu_type, names=sorted(set(names)))

    def on_profile(self, profile: apb.Profile) -> None:
        """Crius §5.1 profiles a Cell's stages on one real GPU after compiling them as they would run
        distributed (Alpa); this agent runs no such compiler, so it says it cannot."""
        self.send(apb.AgentMessage(profile_result=refused(
            profile, self.node_name, self.backend, "stage profiling on real GPUs needs a compiler of "
            "distributed-equivalent stages (Crius §5.1 uses Alpa's), which this agent does not run")), keep=False)

    def node_spec(self) -> NodeSpec:
        if self.node is not None:
            return super().node_spec()
        return NodeSpec(name=self.node_name, gpu_type=self.gpu_type, gpus=len(self.handles),
                        cpus=len(self.enforcement.cores))

    def extra_environment(self, job: ProcessJob) -> dict[str, str]:
        share = self._share(job)
        gpus = ",".join(str(g) for g in share.gpus) if share else ""
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": gpus}

    # --- health -----------------------------------------------------------------

    def _watch_xid(self):
        nvml = self.nvml
        try:
            events = nvml.nvmlEventSetCreate()
            for handle in self.handles:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
            return events
        except Exception as exc:  # not supported on every GPU/driver
            log.info("Xid events are not available; health relies on ECC counts", error=str(exc))
            return None

    def _poll_xid(self) -> None:
        if self._xid_set is None:
            return
        while True:
            try:
                event = self.nvml.nvmlEventSetWait(self._xid_set, 0)
            except Exception:  # NVML_ERROR_TIMEOUT: nothing pending
                return
            self._faults.append(f"Xid {event.eventData}")

    def gpu_status(self) -> tuple[float, bool, str]:
        """(mean utilisation 0..1, healthy, detail) over this node's GPUs."""
        self._poll_xid()
        nvml, parts, utils = self.nvml, [], []
        healthy = not self._faults
        for i, handle in enumerate(self.handles):
            util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            utils.append(util)
            part = f"gpu{i} {util:.0%} {memory.used / 2**30:.1f}/{memory.total / 2**30:.0f} GiB"
            try:
                ecc = nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                       nvml.NVML_VOLATILE_ECC)
            except Exception:  # ECC off or not supported
                ecc = 0
            if ecc:
                healthy = False
                part += f" ECC uncorrected {ecc}"
            parts.append(part)
        if self._faults:
            parts.append("faults: " + ", ".join(self._faults[-5:]))
        return sum(utils) / len(utils), healthy, "; ".join(parts)

    def heartbeat(self, now: float) -> apb.Heartbeat:
        beat = super().heartbeat(now)
        try:
            util, healthy, detail = self.gpu_status()
        except Exception as exc:  # NVML failing mid-run is itself a health problem
            return apb.Heartbeat(cluster_time=now, healthy=False, detail=f"NVML query failed: {exc}; {beat.detail}")
        return apb.Heartbeat(cluster_time=now, gpu_utilization=util, healthy=healthy, detail=f"{detail}; {beat.detail}")

    async def stop_jobs(self) -> None:
        await super().stop_jobs()
        try:
            if self._xid_set is not None:
                self.nvml.nvmlEventSetFree(self._xid_set)
                self._xid_set = None
        except Exception as exc:
            log.info("NVML cleanup failed", error=str(exc))


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
