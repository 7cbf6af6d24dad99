"""deploy/: the systemd units and the container image start the daemons with flags they accept.

No systemd or container runtime is needed: the command lines are read out of the files and
parsed by `halyard`'s own argument parser, so a renamed or removed flag fails here, not at
an operator's first start.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from halyard.cli import build_parser

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
SITE = {"HALYARD_CONTROL_PLANE": "cp.example.org:50052", "HALYARD_NODE": "r0-n0"}  # what agent.env sets


def unit(name: str) -> tuple[dict[str, str], dict[str, str]]:
    """([Service] settings, Environment= defaults) of a unit file, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "systemd" / name).read_text())
    settings, env = {}, {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            if key == "Environment":
                k, v = value.split("=", 1)
                env[k] = v
            else:
                settings[key] = value
    return settings, env


@pytest.mark.parametrize(("name", "command"), [("halyard-controlplane.service", "controlplane"),
                                                ("halyard-agent.service", "agent")])
def test_systemd_units_run_the_daemons_with_valid_flags(name: str, command: str):
    settings, env = unit(name)
    argv = settings["ExecStart"].split()
    assert argv[0] == "/opt/halyard/venv/bin/halyard" and argv[1] == command
    values = env | SITE
    argv = [re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], a) for a in argv[1:]]
    args = build_parser().parse_args(argv)
    assert args.certs == Path("/etc/halyard/certs") and not args.insecure  # TLS, never insecure mode
    assert settings["Restart"] == "on-failure"
    if command == "controlplane":
        assert settings["User"] == "halyard" and str(args.db).startswith(settings["ReadWritePaths"])
        assert args.tokens is not None and args.http.startswith("127.0.0.1:")  # /metrics unauthenticated
    else:
        assert args.run_as == "halyard-jobs" and args.backend == "gpu" and settings["Delegate"] == "yes"


def test_the_container_image_runs_the_control_plane_as_a_user_with_tls():
    text = (DEPLOY / "Containerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", joined, re.MULTILINE).group(1))
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])$", joined, re.MULTILINE).group(1))
    assert entry == ["halyard"]
    args = build_parser().parse_args(cmd)
    assert args.command == "controlplane" and args.certs == Path("/etc/halyard/certs") and not args.insecure
    assert str(args.db).startswith("/var/lib/halyard/")
    assert args.http == "127.0.0.1:9090" and args.tokens is not None  # the HTTP port: loopback unless told
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users and not users[-1].startswith(("root", "0"))
    assert "pip install --no-cache-dir '/src[fast]'" in joined  # from this checkout (with numba), not an index
