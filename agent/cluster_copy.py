"""The cluster file an agent holds, parsed once, with the digest it registers with.

At registration the agent sends the digest; the control plane ships its cluster file only when
the digests differ (``Register.cluster_digest``), and always sends its digest and the agent's own
node, which the agent checks against its copy. A copy is immutable, so every emulated agent of a
process (the fleet benchmark, replay) shares one parse instead of one per node.
"""

from __future__ import annotations

from dataclasses import dataclass

from halyard.datamodel import Cluster, cluster_digest, parse_cluster, read_cluster_text


class StaleCluster(Exception):
    """The control plane's cluster is not the agent's copy: drop the copy and register again for its file."""


class ClusterMismatch(StaleCluster):
    """The file the control plane sent disagrees with its own digest or node spec (another build, a
    corrupted message): registering again would bring the same file, so the agent stops instead."""


@dataclass(frozen=True)
class ClusterCopy:
    cluster: Cluster
    text: str
    digest: str

    @classmethod
    def parse(cls, text: str, *, source: str) -> ClusterCopy:
        return cls(parse_cluster(text, source=source), text, cluster_digest(text))

    @classmethod
    def load(cls, name_or_path: str) -> ClusterCopy:
        """A built-in cluster by name or a TOML file by path (the agent's ``--cluster``)."""
        text, source = read_cluster_text(name_or_path)
        return cls.parse(text, source=source)
