"""Trampoline the process backend starts jobs through: pin, join the cgroup, exec.

``python -m halyard.agent.spawn --cpus 0,1 [--cgroup DIR] [--user UID --group GID] -- COMMAND...``
sets the CPU affinity of itself (inherited by every thread and child the job makes),
moves itself into the job's cgroup, drops to the unprivileged user (``--run-as`` of
the agent: no supplementary groups, then the group, then the user, so it cannot
get root back), then ``exec``s the command. Doing this in
the child before ``exec`` (rather than with ``preexec_fn`` in the agent, which
runs gRPC threads) is fork-safe and leaves no window in which the job runs
unpinned.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    cpus: set[int] = set()
    cgroup = ""
    uid = gid = None
    while argv and argv[0] != "--":
        flag, value, *argv = argv
        if flag == "--cpus":
            cpus = {int(c) for c in value.split(",") if c}
        elif flag == "--cgroup":
            cgroup = value
        elif flag == "--user":
            uid = int(value)
        elif flag == "--group":
            gid = int(value)
        else:
            print(f"halyard spawn: unknown flag {flag}", file=sys.stderr)
            return 2
    command = argv[1:]
    if not command:
        print("halyard spawn: no command after --", file=sys.stderr)
        return 2
    if cpus:
        os.sched_setaffinity(0, cpus)
    if cgroup:
        with open(os.path.join(cgroup, "cgroup.procs"), "w", encoding="ascii") as procs:
            procs.write(str(os.getpid()))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid if gid is None else gid)
        os.setuid(uid)
        if os.getuid() != uid or os.geteuid() != uid:
            print("halyard spawn: could not drop to the run-as user", file=sys.stderr)
            return 126
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"halyard spawn: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
