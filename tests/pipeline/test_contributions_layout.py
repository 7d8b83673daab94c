"""compute_contributions in bulk (EntryLayout) gives exactly what the entry-by-entry loop gives."""

from __future__ import annotations

import math
import random

import numpy as np

from adapter.expressions import compile_expression
from adapter.items import Item
from adapter.pipeline.contributions import EntryLayout, EntryPlan, compute_contributions

FORMULAS = ("n", "n * 2", "n + m", "n / m", "max(n, m) * 1e18", "m")  # some divide by 0, overflow, miss m


def random_case(rng: random.Random) -> tuple[list[EntryPlan], list[Item]]:
    entries = []
    for i in range(rng.randint(1, 12)):
        by_label = rng.random() < 0.1
        name = None if by_label else f"svc-{rng.randrange(8)}"  # repeats: two entries, one target
        text = rng.choice(FORMULAS)
        entries.append(
            EntryPlan(i, "rps", rng.choice(("a", "b")), name, "app" if by_label else None, compile_expression(text))
        )
    items = []
    for k in range(rng.randint(1, 5)):
        values = {"n": float(rng.choice((1, 2, 0, -1, 7))), "m": float(rng.choice((1, 3, 0)))}
        if rng.random() < 0.1:
            del values["m"]
        items.append(Item(1.9e9 + 60 * k, 1.9e9 + 60 * k + 30, values, labels={"app": rng.choice(("x", "y"))}))
    return entries, items


def as_plain(contributions: object) -> tuple:
    by_key = contributions.by_key  # type: ignore[attr-defined]
    return (
        [(key, [a.tolist() for a in arrays]) for key, arrays in by_key.items()],  # order included
        contributions.dropped,  # type: ignore[attr-defined]
        contributions.reasons,  # type: ignore[attr-defined]
    )


def test_the_bulk_path_equals_the_loop_over_random_entries() -> None:
    rng = random.Random(21)
    bulk = 0
    for _ in range(600):
        entries, items = random_case(rng)
        layout = EntryLayout.of(entries)
        bulk += layout.keys is not None
        with np.errstate(all="ignore"):
            expected = as_plain(compute_contributions(entries, items))
            assert as_plain(compute_contributions(entries, items, layout)) == expected
    assert bulk > 100  # the bulk shape came up often enough to be compared


def test_the_bulk_shape_is_one_named_target_per_entry() -> None:
    one = compile_expression("n")
    plain = [EntryPlan(i, "rps", "a", f"svc-{i}", None, one) for i in range(3)]
    assert EntryLayout.of(plain).keys == tuple(("rps", "a", f"svc-{i}") for i in range(3))
    assert EntryLayout.of([*plain, EntryPlan(3, "rps", "a", "svc-0", None, one)]).keys is None  # a target twice
    assert EntryLayout.of([*plain, EntryPlan(3, "rps", "a", None, "app", one)]).keys is None  # named from a label
    # Something to drop falls back to the loop, which reports it per entry.
    items = [Item(1.9e9, 1.9e9 + 60, {"n": math.nan})]
    result = compute_contributions(plain, items, EntryLayout.of(plain))
    assert result.dropped == 3 and len(result.reasons) == 3
    assert [len(arrays[0]) for arrays in result.by_key.values()] == [0, 0, 0]
