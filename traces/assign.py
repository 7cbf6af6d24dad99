"""Seeded, order-independent draws for job attributes a trace lacks.

Every draw is a pure function of ``(seed, key, draw)``: ``key`` is a
non-negative integer that identifies the job within its trace (the data row
number for the processed Philly file, :func:`text_key` of the job's own id for
formats that carry one), ``draw`` numbers the independent decisions made for
one job. So a job gets the same model (or length) whatever the order of the
rows and however the file is sliced.

``H(seed, key, d) = splitmix64(splitmix64(seed) XOR (2 * key + d)) >> 11``
divided by 2**53 is a uniform number in [0, 1) (splitmix64: Steele, Lea &
Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014;
constants from Vigna's reference ``splitmix64.c``). Arithmetic is modulo 2**64.

:func:`assign_models` is the model rule shared by every loader
(``docs/trace-format.md``, "Attributes a trace lacks"):

1. the task is the first of (image, language, speech) whose cumulative
   ``split`` probability exceeds ``H(seed, key, 0)`` (Synergy §5.1 assigns
   models to Philly jobs by such a split; default (20, 70, 10));
2. the model is ``models[floor(H(seed, key, 1) * len(models))]`` of that task's
   Synergy Table 4 models.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from halyard.datamodel import ValidationError
from halyard.traces.generator import (
    SYNERGY_DEFAULT_SPLIT,
    SYNERGY_TASK_MODELS,
    SYNERGY_TASKS,
    task_probabilities,
)

# splitmix64 constants (Vigna, splitmix64.c).
_SM64_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_SM64_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_SM64_MUL2 = np.uint64(0x94D049BB133111EB)
DRAWS_PER_KEY = 2  # draw 0 picks the task, draw 1 the model within it
_MANTISSA_BITS = 53  # a double holds 53 bits: u = (hash >> 11) / 2**53 in [0, 1)
_KEY_BYTES = 8  # text_key: the first 8 bytes of a BLAKE2b digest


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x + _SM64_GAMMA
        z = (z ^ (z >> np.uint64(30))) * _SM64_MUL1
        z = (z ^ (z >> np.uint64(27))) * _SM64_MUL2
        return z ^ (z >> np.uint64(31))


def check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValidationError(f"must be an integer in [0, 2**64), got {seed!r}", field="seed")


def text_key(text: str) -> int:
    """A 64-bit key for a job id: BLAKE2b-64 of its UTF-8 bytes (stable across runs and machines)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=_KEY_BYTES).digest(), "little")


def _keys(keys: Sequence[int] | np.ndarray) -> np.ndarray:
    if isinstance(keys, np.ndarray) and keys.dtype == np.uint64:
        return keys
    values = list(keys) if not isinstance(keys, np.ndarray) else keys.tolist()
    if values and (min(values) < 0 or max(values) >= 2**64):
        raise ValidationError("keys must be integers in [0, 2**64)", field="keys")
    return np.array(values, dtype=np.uint64)


def uniform(seed: int, keys: Sequence[int] | np.ndarray, draw: int) -> np.ndarray:
    """``H(seed, key, draw)`` for each key: uniform numbers in [0, 1)."""
    check_seed(seed)
    k = _keys(keys)
    seed_hash = _splitmix64(np.array([seed], dtype=np.uint64))[0]
    with np.errstate(over="ignore"):
        counter = k * np.uint64(DRAWS_PER_KEY) + np.uint64(draw)
    bits = _splitmix64(counter ^ seed_hash) >> np.uint64(64 - _MANTISSA_BITS)
    return bits.astype(np.float64) / float(2**_MANTISSA_BITS)


def assign_models(keys: Sequence[int] | np.ndarray, *, seed: int = 0,
                  split: Sequence[float] = SYNERGY_DEFAULT_SPLIT) -> list[str]:
    """The model for each key: a pure function of ``(seed, key)`` (module docstring)."""
    check_seed(seed)
    probs = task_probabilities(split)
    k = _keys(keys)
    cumulative = np.cumsum(probs)
    cumulative[-1] = 1.0  # guard against rounding: every u < 1 lands in a task
    task = np.searchsorted(cumulative, uniform(seed, k, 0), side="right")
    # A task with probability 0 is never chosen: searchsorted skips empty intervals.
    u_model = uniform(seed, k, 1)
    out = []
    for t, u in zip(task.tolist(), u_model.tolist(), strict=True):
        models = SYNERGY_TASK_MODELS[SYNERGY_TASKS[t]]
        out.append(models[int(u * len(models))])
    return out
