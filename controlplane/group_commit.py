"""Group commit: the submissions of a burst share one store transaction and one scheduling pass.

Why a module of its own: a transaction and a pass per submission cost O(running jobs) each on
the event loop, so a client's loop of submissions would wait on them one by one. The bargain
(how long a commit waits for more callers, learned from how they come) is a policy of its
own, measured by ``benchmarks/bench_ingest.py``, and independent of what a commit stores or
what the pass decides: :class:`GroupCommit` only counts callers and says when to commit;
the control plane (``ControlPlane._group_commit``) stores and passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from halyard.scheduling.state import StoreError

# Choices of ours, measured by benchmarks/bench_ingest.py: a commit waiting for the callers it expects
# gives up once none has joined for this long (0: it waits only for the calls already delivered), and
# waits at most this many windows in all.
GROUP_COMMIT_WINDOW_S = 1e-3
GROUP_COMMIT_MAX_WINDOWS = 20
GROUP_COMMIT_MAX_PROBE_GAP = 1024  # a lone submitter probes (waits a window) in this many commits at most
MAX_GROUP_COMMIT_WINDOW_MS = 100.0  # a longer wait is a misconfiguration, not a trade


class GroupCommit:
    """Submissions applied but not stored yet, the callers waiting for their commit, and when to make it."""

    def __init__(self, window_s: float = GROUP_COMMIT_WINDOW_S) -> None:
        self.window_s = window_s
        self.uncommitted = 0  # submissions applied, not stored yet
        self._group: asyncio.Future[None] | None = None  # what their callers wait on, resolved by done()
        self._wanted = asyncio.Event()
        self._waiting = 0  # callers waiting in committed() for the next commit
        self._callers = 1  # the active callers the next commit waits for (gather)
        self._enough: asyncio.Future[None] | None = None  # resolved once _want callers are waiting
        self._want = 1
        self._probe_gap = 1  # commits of one caller between probes for a second (doubles while none comes)
        self._probe_in = 0  # commits of one caller until the next probe (counted in done(), by any commit path)
        self.on_commit: Callable[[int], None] | None = None  # metrics hook: submissions in each commit

    def add(self) -> None:
        """A submission was applied: the next commit holds it."""
        self.uncommitted += 1
        self._wanted.set()

    async def committed(self) -> None:
        """Return once the commit holding every submission added so far is made (see :meth:`done`)."""
        if self.uncommitted == 0:
            return
        if self._group is None:
            self._group = asyncio.get_running_loop().create_future()
        self._waiting += 1
        enough = self._enough
        if enough is not None and self._waiting >= self._want and not enough.done():
            enough.set_result(None)
        await asyncio.shield(self._group)

    def done(self) -> None:
        """Everything applied so far is stored: answer the callers waiting for it."""
        if self.uncommitted:
            if self.on_commit is not None:
                self.on_commit(self.uncommitted)
            if self._waiting <= 1:
                self._probe_in -= 1
        self.uncommitted = 0
        self._waiting = 0
        group, self._group = self._group, None
        if group is not None and not group.done():
            group.set_result(None)

    def failed(self, exc: Exception) -> None:
        """The store failed: the callers waiting for a commit are told their jobs were not stored."""
        group, self._group = self._group, None
        if group is not None and not group.done():
            group.set_exception(StoreError(f"the job was not stored: {exc}"))

    async def run(self, commit: Callable[[], bool]) -> None:
        """For each burst, once gathered: ``commit()`` (False: stop for good), unless a commit made in
        between (a cancel, an agent's report) took the burst's submissions with it."""
        while True:
            await self._wanted.wait()
            await self.gather()
            self._wanted.clear()
            if self.uncommitted == 0:
                continue  # another change's commit took them
            if not commit():
                return

    async def gather(self) -> None:
        """Let the active callers join a commit before it is made.

        Every call gRPC has already delivered joins in the next turn of the event loop.
        But gRPC's asyncio server hands over one new call per trip through its poller
        thread, so 50 callers answered together come back one by one over the next
        ~50 calls' worth of CPU, far longer than any fixed window: a commit that waited
        a fixed 1 ms held ~2 of them, and each paid a transaction, a pass and the wake-ups.
        So the commit waits for the callers it expects (``_callers``) while they keep
        coming, and gives up once none has joined for ``window_s`` (or after
        ``GROUP_COMMIT_MAX_WINDOWS`` windows in all). The expectation is learned: a commit
        that got all it waited for expects one caller more next time when its callers came
        concurrently (more may be active), and one that gave up expects half as many (at least
        those that came), so a stalled client does not undo what was learned.
        While commits hold one caller each, a commit now and then waits (a window, longer while
        the loop is too busy to deliver calls, up to ``GROUP_COMMIT_MAX_WINDOWS``) to see whether
        a second caller comes, backing off exponentially (to one in
        ``GROUP_COMMIT_MAX_PROBE_GAP`` commits) while none does: callers whose calls gRPC
        delivers one at a time show no concurrency otherwise. So a lone submitter almost
        never waits, and 50 callers in a loop share a commit. The commits between probes are
        counted in :meth:`done`, by whichever path made them: a scheduling pass's own persist
        often takes a lone caller's submission before this gather sees its caller.
        PostgreSQL's ``commit_delay`` makes the same bargain, waiting only while
        ``commit_siblings`` other transactions are active.
        """
        await asyncio.sleep(0)
        window = self.window_s
        if window <= 0:
            return
        target, probing = self._callers, False
        if target <= 1 and self._waiting <= 1 and self._probe_in <= 0:
            target, probing = 2, True  # does a second caller come?
        if self._waiting < target:
            await self._await_callers(target, window)
        if self._waiting >= target:  # all came
            if self._waiting > 1:  # concurrently: another may be active
                self._callers, self._probe_gap = self._waiting + 1, 1
            return
        if probing:  # none came: probe less often
            self._probe_gap = min(2 * self._probe_gap, GROUP_COMMIT_MAX_PROBE_GAP)
            self._probe_in = self._probe_gap
        else:  # gave up: expect fewer (halved, as TCP's congestion window), at least those that came
            self._callers = max(1, self._waiting, self._callers // 2)

    async def _await_callers(self, target: int, window: float) -> None:
        """Until ``target`` callers wait, none has joined for ``window``, or ``GROUP_COMMIT_MAX_WINDOWS``
        windows have passed."""
        loop = asyncio.get_running_loop()
        self._enough = enough = loop.create_future()
        self._want = target
        deadline = loop.time() + GROUP_COMMIT_MAX_WINDOWS * window

        def check(seen: int, due: float) -> None:  # a timer per window, not per caller
            if enough.done():
                return
            now = loop.time()
            # None joined in a window: give up, unless the loop was busy (this check ran late), since
            # the calls gRPC queued meanwhile are delivered only after it.
            if (self._waiting == seen and now - due < window / 2) or now >= deadline:
                enough.set_result(None)
            else:
                timers[0] = loop.call_at(now + window, check, self._waiting, now + window)

        timers = [loop.call_at(loop.time() + window, check, self._waiting, loop.time() + window)]
        try:
            await enough
        finally:
            timers[0].cancel()
            self._enough = None
