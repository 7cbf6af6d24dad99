"""The environment a job's processes start with: an allow-list of the agent's own, never all of it.

An agent's environment holds what the agent needs and a job must not see: its credentials
(``HALYARD_TOKEN``, ``HALYARD_KEY``, cloud keys), proxies, whatever the operator's shell
exported, and a job must not inherit all of it. A job gets, in this order
(later ones win):

1. from the agent's environment only the names in :data:`INHERITED_NAMES` and those
   starting with :data:`INHERITED_PREFIXES` (what finds programs and libraries, the locale,
   the CUDA and NCCL settings of the machine), plus what the operator passes on with
   ``halyard agent --pass-env NAME`` (a name, or a prefix ending in ``*``);
2. what the agent sets for the job: the ``HALYARD_*`` variables of
   :mod:`halyard.agent.worker`, the rendezvous (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
   ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), ``OMP_NUM_THREADS``, and with
   ``--run-as`` the user's ``HOME``, ``USER``, ``LOGNAME``; the gpu backend's
   ``CUDA_VISIBLE_DEVICES``;
3. the job's own ``env``.

``HALYARD_*``, the rendezvous names and ``CUDA_VISIBLE_DEVICES`` are never inherited from the
agent: the agent sets the job's own (the GPUs are its allocation's), and an agent's ``HALYARD_*``
are its own settings (a token among them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# What a program needs to run on this machine: find programs, libraries and Python packages (the worker
# library included), speak the locale, keep temporary files where the machine keeps them.
INHERITED_NAMES = frozenset({
    "PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
    "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV",
})
# The locale's parts, the machine's CUDA settings (CUDA_HOME, CUDA_DEVICE_ORDER, ...) and NCCL's (the
# interfaces and HCAs a collective uses on this machine, e.g. NCCL_SOCKET_IFNAME, NCCL_IB_HCA).
INHERITED_PREFIXES = ("LC_", "CUDA_", "NCCL_")
# Set by the agent for each job, never taken from the agent's environment.
AGENT_SET_PREFIXES = ("HALYARD_",)
RENDEZVOUS_NAMES = frozenset({"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})
# Which GPUs a job sees is its allocation's (the gpu backend sets it), never the agent's own view.
DEVICE_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})


class EnvironmentAllowList:
    """Which of the agent's variables a job inherits: :data:`INHERITED_NAMES`, :data:`INHERITED_PREFIXES`
    and the operator's ``--pass-env`` entries (names, or prefixes ending in ``*``)."""

    def __init__(self, passed: Iterable[str] = ()) -> None:
        names, prefixes = set(INHERITED_NAMES), list(INHERITED_PREFIXES)
        for entry in passed:
            if entry.endswith("*"):
                prefixes.append(entry[:-1])
            else:
                names.add(entry)
        self.names = frozenset(names)
        self.prefixes = tuple(prefixes)

    def allows(self, name: str) -> bool:
        if name.startswith(AGENT_SET_PREFIXES) or name in RENDEZVOUS_NAMES or name in DEVICE_NAMES:
            return False
        return name in self.names or name.startswith(self.prefixes)

    def inherited(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The part of ``environ`` (the agent's) that a job starts with."""
        return {k: v for k, v in environ.items() if self.allows(k)}
