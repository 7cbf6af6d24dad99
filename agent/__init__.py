"""Node agents and the worker library.

* :mod:`halyard.agent.base` - the AgentService stream, reconnect and reporting every backend shares;
* :mod:`halyard.agent.emulated` - ``EmulatedAgent``: jobs run on the performance model;
* :mod:`halyard.agent.process` - ``ProcessAgent``: jobs run as real processes (CPU pinning, cgroup memory);
* :mod:`halyard.agent.gpu` - ``GpuAgent``: the process backend plus NVML (imported only when used);
* :mod:`halyard.agent.worker` - ``Worker``: what a training script imports (docs/worker.md).

Submodules are imported on demand so that importing one backend never pulls in another's dependencies.
"""
