"""Delta debugging: the smallest set of a change's parts that still makes a finding (Zeller and
Hildebrandt's ddmin, "Simplifying and Isolating Failure-Inducing Input", 2002).

The parts (hunks, steps) are split into n chunks; a chunk that alone still makes
the finding becomes the new set (n back to 2), else a complement (all but one
chunk) that does (n one less), else n doubles; it ends when every single part
has been tried and none could go. The result is 1-minimal: leaving out any one
of its parts loses the finding (`ddmin` has tried each of those sets).

A set that cannot be measured (its hunks do not apply, its code does not import)
counts as "does not make the finding", as ddmin's unresolved outcome does. The
candidates of one round are asked for `width` at a time, so a caller can
measure them side by side; the first that makes the finding, in ddmin's order,
is taken whatever the width, so the result does not depend on it. Each batch comes with
the batch that may be asked next, so a caller can prepare those sets while it measures these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: A set of parts, in the change's order.
Parts = tuple[int, ...]
#: Whether each of the given sets makes the finding, in order; the second list holds the sets that
#: may be asked about next (empty when none is known).
Reproduces = Callable[[list[Parts], list[Parts]], list[bool]]


def ddmin(parts: Sequence[int], reproduces: Reproduces, width: int = 1) -> Parts:
    """A 1-minimal subset of `parts` that still makes the finding; `parts` must make it."""
    current = tuple(parts)
    n = 2
    while len(current) >= 2:
        chunks = split(current, n)
        candidates = list(chunks)
        if n > 2:  # with two chunks, each complement is the other chunk
            candidates += [without(current, chunk) for chunk in chunks]
        hit = _first(candidates, reproduces, max(1, width))
        if hit is None:
            if n >= len(current):
                break
            n = min(2 * n, len(current))
        elif hit < len(chunks):
            current, n = candidates[hit], 2
        else:
            current, n = candidates[hit], max(n - 1, 2)
    return current


def split(parts: Parts, n: int) -> list[Parts]:
    """`parts` in `n` consecutive chunks of sizes differing by at most one."""
    return [parts[i * len(parts) // n : (i + 1) * len(parts) // n] for i in range(n)]


def without(parts: Parts, left_out: Parts) -> Parts:
    gone = set(left_out)
    return tuple(p for p in parts if p not in gone)


def _first(candidates: list[Parts], reproduces: Reproduces, width: int) -> int | None:
    for start in range(0, len(candidates), width):
        batch = candidates[start : start + width]
        answers = reproduces(batch, candidates[start + width : start + 2 * width])
        if len(answers) != len(batch):
            raise ValueError(f"asked about {len(batch)} sets, told about {len(answers)}")
        for offset, made in enumerate(answers):
            if made:
                return start + offset
    return None
