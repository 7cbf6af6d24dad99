"""Active and standby control planes over one PostgreSQL store: a lease with a fencing epoch.

Every control plane on a ``postgresql://`` store campaigns for one row of the ``leader`` table.
The row says who leads (``holder``, the addresses it serves on), since when, and until when
(``expires_at``), all timed by the database's clock (``clock_timestamp()``), so the control planes'
own clocks never have to agree. Taking the row increments ``epoch``: the fencing token.

* **Campaign.** A standby tries every ``retry_period_s`` to take the row; it succeeds once
  ``expires_at`` has passed by the database's clock (or the leader resigned), or at once when the
  leader's database session is gone (its process died: PostgreSQL drops the session lock the
  leader holds, as ZooKeeper drops an ephemeral node), and then holds epoch ``previous + 1``.
* **Renew.** The leader extends ``expires_at`` to ``now + duration_s`` every ``retry_period_s``,
  only while its epoch is still the row's and the lease has not expired. If no renewal succeeds for
  ``renew_deadline_s`` (shorter than the lease, by its own monotonic clock) it steps down: the
  control plane refuses every change and its daemon exits, for a supervisor to restart it as a
  standby. A renewal that finds another epoch, or an expired lease, steps down at once.
* **Fence.** Every write transaction of the store checks the epoch and the expiry first, under the
  row's lock (:mod:`store_postgres`), so a leader paused past its lease (SIGSTOP) commits nothing
  when it resumes, and the next leader reads the state only after every commit of the previous one.

The defaults are Kubernetes' leader election's (kube-scheduler, kube-controller-manager,
Kueue: ``--leader-elect-lease-duration=15s``, ``--leader-elect-renew-deadline=10s``,
``--leader-elect-retry-period=2s``): a dead leader is replaced after at most ``duration_s +
retry_period_s`` (17 s) when it hangs (paused, partitioned), within ``retry_period_s`` when it dies,
plus the new leader's restore.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import structlog

from halyard.controlplane.store_postgres import CONNECT_TIMEOUT_S, redact
from halyard.datamodel import HalyardError, ValidationError

log = structlog.get_logger("halyard.leadership")

__all__ = ["DEFAULT_LEASE", "LEADER_METADATA_KEY", "Leadership", "LeaseSettings", "LostLeadership"]

LEADERSHIP_NAME = "controlplane"
# The trailing-metadata key of a standby's UNAVAILABLE answer: the leader's address (clients' or agents').
LEADER_METADATA_KEY = "halyard-leader"

# Takes the row when its lease has expired, or when its epoch is %(gone)s: the leader of that epoch whose
# session is gone (see Leadership.campaign); -1 when not.
_ACQUIRE = """
INSERT INTO leader AS l (name, holder, address, epoch, acquired_at, renewed_at, expires_at)
VALUES (%(name)s, %(holder)s, %(address)s, 1, clock_timestamp(), clock_timestamp(),
        clock_timestamp() + make_interval(secs => %(lease)s))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, address = excluded.address, epoch = l.epoch + 1,
    acquired_at = clock_timestamp(), renewed_at = clock_timestamp(),
    expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE l.expires_at <= clock_timestamp() OR l.epoch = %(gone)s
RETURNING epoch
"""
_RENEW = """
UPDATE leader SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE name = %(name)s AND epoch = %(epoch)s AND expires_at > clock_timestamp()
"""
_RESIGN = "UPDATE leader SET expires_at = clock_timestamp() WHERE name = %(name)s AND epoch = %(epoch)s"
_CURRENT = ("SELECT holder, address, epoch, expires_at > clock_timestamp() FROM leader WHERE name = %(name)s")
# The session lock of a leadership epoch: pg_advisory_lock(LOCK_CLASS, epoch mod 2^31), held by the leader's
# lease connection. PostgreSQL releases it the moment that connection ends, so a standby that can take it
# knows the leader's session is gone (its process died: kill -9 closes its sockets at once).
LOCK_CLASS = 0x68616C79  # "haly"
_LOCK = "SELECT pg_advisory_lock(%s, %s)"
_TRY_LOCK = "SELECT pg_try_advisory_lock(%s, %s)"
_UNLOCK = "SELECT pg_advisory_unlock(%s, %s)"


def _lock_key(epoch: int) -> tuple[int, int]:
    return LOCK_CLASS, epoch % 2**31


class LostLeadership(HalyardError):
    """This control plane no longer leads: another took the lease, or it could not renew in time."""


@dataclass(frozen=True)
class LeaseSettings:
    duration_s: float = 15.0  # Kubernetes' --leader-elect-lease-duration default
    renew_deadline_s: float = 10.0  # Kubernetes' --leader-elect-renew-deadline default
    retry_period_s: float = 2.0  # Kubernetes' --leader-elect-retry-period default

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.duration_s:
            raise ValidationError(f"need 0 < retry period ({self.retry_period_s:g} s) < renew deadline "
                                  f"({self.renew_deadline_s:g} s) < lease duration ({self.duration_s:g} s)",
                                  field="--lease-duration-s")


DEFAULT_LEASE = LeaseSettings()


class Leadership:
    """One control plane's side of the lease: :meth:`campaign` until it leads, then :meth:`keep` it."""

    def __init__(self, url: str, addresses: dict[str, str], settings: LeaseSettings = DEFAULT_LEASE,
                 *, name: str = LEADERSHIP_NAME) -> None:
        self.url = url
        self.name = name
        self.settings = settings
        self.identity = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.addresses = addresses  # {"clients": HOST:PORT, "agents": HOST:PORT}: where this one serves
        self.epoch = 0  # while leading
        self.leader: dict[str, Any] | None = None  # the current leader's row, as last seen by a standby
        self._db: Any = None
        self._locked = False  # this connection holds the session lock of self.epoch

    def _params(self, **extra: object) -> dict[str, object]:
        return {"name": self.name, "holder": self.identity, "address": json.dumps(self.addresses),
                "lease": self.settings.duration_s, "epoch": self.epoch, "gone": -1, **extra}

    async def _connection(self) -> Any:
        if self._db is None or self._db.closed:
            import psycopg

            self._db = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="halyard-leadership")
        return self._db

    def leader_address(self, kind: str) -> str:
        """Where the leader serves ``kind`` ("clients" or "agents"), as last seen; "" if unknown."""
        if not self.leader or not self.leader.get("live"):
            return ""
        return str(self.leader.get("addresses", {}).get(kind, ""))

    async def campaign(self) -> int:
        """Wait until this control plane leads; its epoch.

        Every ``retry_period_s`` it reads the row. It takes the row when the lease has expired by the
        database's clock, or when it can take the leader's session lock (:data:`LOCK_CLASS`): the leader's
        connection is gone, as when its process was killed, so the standby need not wait out the lease.
        A leader that is alive but paused keeps its connection, and so its lease, until the lease ends.
        Either way the fence, not this timing, keeps a former leader from writing."""
        import psycopg

        while True:
            try:
                db = await self._connection()
                epoch = await self._try_to_lead(db)
                if epoch:
                    self.epoch = epoch
                    self._locked = True
                    self.leader = {"holder": self.identity, "addresses": self.addresses, "epoch": epoch, "live": True}
                    log.info("leading", epoch=epoch, identity=self.identity)
                    return epoch
            except psycopg.Error as exc:
                log.warning("standby: cannot reach the store", store=redact(self.url), error=str(exc).strip())
                await self._drop()
            await asyncio.sleep(self.settings.retry_period_s)

    async def _try_to_lead(self, db: Any) -> int:
        current = await (await db.execute(_CURRENT, self._params())).fetchone()
        gone = -1
        if current is not None:
            seen = {"holder": current[0], "addresses": json.loads(current[1]), "epoch": current[2], "live": current[3]}
            if self.leader is None or seen["epoch"] != self.leader.get("epoch"):
                log.info("standby: another control plane leads", leader=seen["holder"], epoch=seen["epoch"])
            self.leader = seen
            if seen["live"]:
                if not (await (await db.execute(_TRY_LOCK, _lock_key(seen["epoch"]))).fetchone())[0]:
                    return 0  # the leader's session is there: it leads
                gone = seen["epoch"]
                log.info("standby: the leader's session is gone", leader=seen["holder"], epoch=gone)
        try:
            async with db.transaction():  # the new epoch is seen by others only with its lock held
                row = await (await db.execute(_ACQUIRE, self._params(gone=gone))).fetchone()
                if row is None:
                    return 0
                await db.execute(_LOCK, _lock_key(int(row[0])))
                return int(row[0])
        finally:
            if gone >= 0:
                await db.execute(_UNLOCK, _lock_key(gone))

    async def keep(self) -> None:
        """Renew the lease until it is lost; then raise :class:`LostLeadership` (never returns otherwise)."""
        import psycopg

        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.retry_period_s)
            try:
                db = await self._connection()
                if not self._locked:  # a new connection: the session lock went with the old one
                    if not (await (await db.execute(_TRY_LOCK, _lock_key(self.epoch))).fetchone())[0]:
                        raise LostLeadership(f"the session lock of epoch {self.epoch} was taken: a standby saw "
                                             "this leader's connection end")
                    self._locked = True
                async with asyncio.timeout(self.settings.renew_deadline_s):
                    done = await db.execute(_RENEW, self._params())
                if done.rowcount != 1:
                    raise LostLeadership(f"the lease of epoch {self.epoch} was taken over or expired")
                renewed = time.monotonic()
            except (psycopg.Error, TimeoutError) as exc:
                await self._drop()
                late = time.monotonic() - renewed
                if late >= self.settings.renew_deadline_s:
                    raise LostLeadership(f"could not renew the lease for {late:.1f} s (renew deadline "
                                         f"{self.settings.renew_deadline_s:g} s): {str(exc).strip()}") from exc
                log.warning("lease renewal failed; retrying", epoch=self.epoch, error=str(exc).strip(),
                            since_s=round(late, 1))

    async def resign(self) -> None:
        """Let a standby take over at once (a clean shutdown), instead of after the lease."""
        if self.epoch:
            try:
                db = await self._connection()
                await db.execute(_RESIGN, self._params())
                log.info("resigned", epoch=self.epoch)
            except Exception as exc:  # the lease then expires on its own
                log.warning("could not resign; the lease expires on its own", error=str(exc).strip())

    async def _drop(self) -> None:
        self._locked = False
        if self._db is not None:
            try:
                await self._db.close()
            finally:
                self._db = None

    async def close(self) -> None:
        await self._drop()
