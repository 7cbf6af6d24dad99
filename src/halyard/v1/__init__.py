"""Generated protocol modules (package halyard.v1); regenerate with proto/generate.py.

The .proto sources ship beside these modules. ``PROTO_INCLUDE`` is their include root, the
directory that holds the ``halyard`` package: ``protoc -I PROTO_INCLUDE halyard/v1/job_service.proto``,
``grpcurl -import-path PROTO_INCLUDE -proto halyard/v1/job_service.proto`` (docs/api.md).
"""

from pathlib import Path

PROTO_INCLUDE = str(Path(__file__).resolve().parents[2])
PROTO_FILES = ('halyard/v1/agent_service.proto', 'halyard/v1/cluster_service.proto', 'halyard/v1/job_service.proto', 'halyard/v1/types.proto')
