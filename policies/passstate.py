"""State shared by the stages of one scheduling pass, under named keys.

Kubernetes' ``CycleState``: "StateData stored by one plugin can be read by another".
The core creates one :class:`PassState` per pass and hands it to the policy, and the
same object to :meth:`Policy.on_applied` / :meth:`Policy.on_rejected` afterwards, so
what a stage decided tentatively (an auto-tuner's acceptances, Tiresias' queue
changes) is committed only once the core has applied the plan. Keys are named by the
owning stage, ``"dally/acceptances"``, ``"tiresias/queues"``; nothing survives the pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class PassState:
    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def put(self, key: str, value: object) -> None:
        self._data[key] = value

    def setdefault(self, key: str, factory: Callable[[], T]) -> T:
        """The value under ``key``, made by ``factory`` the first time it is asked for in this pass."""
        value = self._data.get(key)
        if value is None:
            value = self._data[key] = factory()
        return value

    def __contains__(self, key: str) -> bool:
        return key in self._data
