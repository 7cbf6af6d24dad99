"""Trampoline the process backend starts jobs through: pin, join the cgroup, exec.

``python -m halyard.agent.spawn --cpus 0,1 [--cgroup DIR] -- COMMAND...`` sets
the CPU affinity of itself (inherited by every thread and child the job makes),
moves itself into the job's cgroup, then ``exec``s the command. Doing this in
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
    while argv and argv[0] != "--":
        flag, value, *argv = argv
        if flag == "--cpus":
            cpus = {int(c) for c in value.split(",") if c}
        elif flag == "--cgroup":
            cgroup = value
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
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"halyard spawn: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
