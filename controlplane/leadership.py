"""Active and standby control planes over one PostgreSQL store: a lease with a fencing epoch.

Every control plane on a ``postgresql://`` store campaigns for one row of the ``leader`` table.
The row says who leads (``holder``, the addresses it serves on), since when, and until when
(``expires_at``), all timed by the database's clock (``clock_timestamp()``), so the control planes'
own clocks never have to agree. Taking the row increments ``epoch``: the fencing token.

* **Campaign.** A standby tries every ``retry_period_s`` to take the row; it succeeds only once
  ``expires_at`` has passed by the database's clock (or the leader resigned), and then holds
  epoch ``previous + 1``.
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
retry_period_s`` (17 s), plus the new leader's restore.
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

_ACQUIRE = """
INSERT INTO leader AS l (name, holder, address, epoch, acquired_at, renewed_at, expires_at)
VALUES (%(name)s, %(holder)s, %(address)s, 1, clock_timestamp(), clock_timestamp(),
        clock_timestamp() + make_interval(secs => %(lease)s))
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, address = excluded.address, epoch = l.epoch + 1,
    acquired_at = clock_timestamp(), renewed_at = clock_timestamp(),
    expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE l.expires_at <= clock_timestamp()
RETURNING epoch
"""
_RENEW = """
UPDATE leader SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() + make_interval(secs => %(lease)s)
WHERE name = %(name)s AND epoch = %(epoch)s AND expires_at > clock_timestamp()
"""
_RESIGN = "UPDATE leader SET expires_at = clock_timestamp() WHERE name = %(name)s AND epoch = %(epoch)s"
_CURRENT = ("SELECT holder, address, epoch, expires_at > clock_timestamp() FROM leader WHERE name = %(name)s")


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

    def _params(self, **extra: object) -> dict[str, object]:
        return {"name": self.name, "holder": self.identity, "address": json.dumps(self.addresses),
                "lease": self.settings.duration_s, "epoch": self.epoch, **extra}

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
        """Wait until this control plane leads; its epoch."""
        import psycopg

        while True:
            try:
                db = await self._connection()
                row = await (await db.execute(_ACQUIRE, self._params())).fetchone()
                if row is not None:
                    self.epoch = int(row[0])
                    self.leader = {"holder": self.identity, "addresses": self.addresses, "epoch": self.epoch,
                                   "live": True}
                    log.info("leading", epoch=self.epoch, identity=self.identity)
                    return self.epoch
                current = await (await db.execute(_CURRENT, self._params())).fetchone()
                if current is not None:
                    seen = {"holder": current[0], "addresses": json.loads(current[1]), "epoch": current[2],
                            "live": current[3]}
                    if self.leader is None or seen["epoch"] != self.leader.get("epoch"):
                        log.info("standby: another control plane leads", leader=seen["holder"], epoch=seen["epoch"])
                    self.leader = seen
            except psycopg.Error as exc:
                log.warning("standby: cannot reach the store", store=redact(self.url), error=str(exc).strip())
                await self._drop()
            await asyncio.sleep(self.settings.retry_period_s)

    async def keep(self) -> None:
        """Renew the lease until it is lost; then raise :class:`LostLeadership` (never returns otherwise)."""
        import psycopg

        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.settings.retry_period_s)
            try:
                db = await self._connection()
                done = await asyncio.wait_for(db.execute(_RENEW, self._params()),
                                              self.settings.renew_deadline_s)
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
        if self._db is not None:
            try:
                await self._db.close()
            finally:
                self._db = None

    async def close(self) -> None:
        await self._drop()
