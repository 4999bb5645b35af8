"""Star fields to compress: stars, the positions users view them from, and the value of a kept subset.

A field holds ``n`` stars and a few views (3-D points, coordinates rounded to 0.1 as the prompt shows
them), a view radius and a budget. A star is *seen* from a view within the radius of it; a star's value is
the number of views that see it (the points-in-view count the compressed map keeps). A kept subset is worth
the sum of its stars' values; the best subset within the budget keeps the most valuable stars, so a kept
subset scores its worth over that optimum (1.0 is optimal).

Fields are generated from a seed: stars in a few Gaussian clusters of a flattened disc (as a galaxy
subset), views near random stars; or cut from a catalogue (an ``N x 3`` array of star positions, further
columns ignored, and optionally an ``M x 3`` array of view positions): the stars nearest the drawn views.
The radius is the median distance from a star to its nearest view (about half the stars are seen); the
budget is ``keep_fraction`` of the stars.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

Point = tuple[float, float, float]


@dataclass(frozen=True)
class StarField:
    """Stars and views (rounded points), the view radius and how many stars may be kept."""

    stars: tuple[Point, ...]
    views: tuple[Point, ...]
    radius: float
    budget: int

    def values(self) -> list[int]:
        """Each star's value: how many views see it."""
        return [sum(1 for v in self.views if math.dist(s, v) <= self.radius) for s in self.stars]

    def optimum(self) -> int:
        """The worth of the best subset within the budget."""
        return sum(sorted(self.values(), reverse=True)[: self.budget])

    def worth(self, kept: set[int]) -> int:
        """The worth of the kept stars (indices)."""
        values = self.values()
        return sum(values[i] for i in kept)


def _round(point: Sequence[float]) -> Point:
    return (round(float(point[0]), 1), round(float(point[1]), 1), round(float(point[2]), 1))


def _finish(stars: list[Point], views: list[Point], keep_fraction: float) -> StarField:
    nearest = sorted(min(math.dist(s, v) for v in views) for s in stars)
    radius = round(nearest[len(nearest) // 2], 1)
    budget = max(1, round(keep_fraction * len(stars)))
    return StarField(tuple(stars), tuple(views), radius, budget)


def generate_field(rng: random.Random, n_stars: int, n_views: int, keep_fraction: float) -> StarField:
    """A seeded synthetic field (see the module docstring)."""
    centres = [(rng.uniform(-100, 100), rng.uniform(-100, 100), rng.uniform(-10, 10)) for _ in range(3)]
    stars = []
    for _ in range(n_stars):
        cx, cy, cz = rng.choice(centres)
        stars.append(_round((rng.gauss(cx, 25), rng.gauss(cy, 25), rng.gauss(cz, 4))))
    views = []
    for _ in range(n_views):
        sx, sy, sz = rng.choice(stars)
        views.append(_round((rng.gauss(sx, 20), rng.gauss(sy, 20), rng.gauss(sz, 3))))
    return _finish(stars, views, keep_fraction)


def catalogue_field(
    rng: random.Random,
    stars: Sequence[Sequence[float]],
    views: Optional[Sequence[Sequence[float]]],
    n_stars: int,
    n_views: int,
    keep_fraction: float,
) -> StarField:
    """A field cut from a catalogue: ``n_views`` views drawn from ``views`` (or placed near random stars when
    there are none) and the ``n_stars`` stars nearest to them."""
    if views:
        chosen = [_round(v) for v in rng.sample(list(views), min(n_views, len(views)))]
    else:
        chosen = [_round(rng.choice(stars)) for _ in range(n_views)]
    nearest = sorted(stars, key=lambda s: min(math.dist(s[:3], v) for v in chosen))[:n_stars]
    picked = [_round(s) for s in nearest]
    rng.shuffle(picked)
    return _finish(picked, chosen, keep_fraction)


def parse_kept(answer: Optional[str], n_stars: int) -> Optional[set[int]]:
    """The star indices an answer lists (integers separated by commas, semicolons or spaces; repeats count
    once), or None when it lists none, holds anything else, or names a star that does not exist."""
    if answer is None:
        return None
    tokens = [t for t in answer.replace(",", " ").replace(";", " ").split() if t]
    if not tokens or not all(t.isdigit() for t in tokens):
        return None
    kept = {int(t) for t in tokens}
    return kept if all(i < n_stars for i in kept) else None
