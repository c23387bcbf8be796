"""Per-position acceptance rates as a bar chart: each branch beside the oracle (geometry only).

The HTML template draws the bars as inline SVG; this module only computes
where they go, so the chart needs no script and no library, and every label
in it passes through the template's escaping.
"""

from __future__ import annotations

from dataclasses import dataclass

from difftest.core.records import Result, Totals
from difftest.reports.views import ScenarioView

#: Plot area and margins, in SVG user units (the SVG scales to its box).
BAR, GAP, LEFT, TOP, PLOT_H, BOTTOM = 10, 14, 34, 8, 100, 22


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    series: int
    title: str


@dataclass(frozen=True)
class Chart:
    width: float
    height: float
    bars: list[Bar]
    #: (x, text) under each position's group of bars.
    positions: list[tuple[float, str]]
    #: (y, text) of the horizontal grid lines (0 %, 50 %, 100 %).
    grid: list[tuple[float, str]]
    #: Series names; the last is the oracle.
    series: list[str]


def rates(totals: Totals | None) -> list[float | None]:
    """accepted / draft tokens per position (None where no draft was verified at that position)."""
    if totals is None:
        return []
    # A branch's two per-position lists may differ in length (nothing makes them agree): the
    # positions both report.
    return [
        a / d if d else None
        for a, d in zip(
            totals.num_accepted_tokens_per_pos, totals.num_draft_tokens_per_pos, strict=False
        )
    ]


def acceptance_chart(view: ScenarioView) -> Chart | None:
    """The shown run's per-position acceptance rate of every branch and of the oracle;
    None if no draft was verified."""
    chosen: list[Result | None] = [
        next((r for r in view.results.get(b, []) if r.label == view.shown), None)
        for b in view.branches
    ]
    expected = next((r.expected for r in chosen if r is not None and r.expected is not None), None)
    series = [rates(r.measured if r is not None else None) for r in chosen] + [rates(expected)]
    names = [*view.branches, "oracle"]
    k = max((len(s) for s in series), default=0)
    if not k or all(v is None for s in series for v in s):
        return None
    group = len(series) * BAR + GAP
    width = LEFT + k * group
    bars = []
    for position in range(k):
        for index, values in enumerate(series):
            value = values[position] if position < len(values) else None
            if value is None:
                continue
            height = PLOT_H * value
            x = LEFT + position * group + index * BAR + GAP / 2
            bars.append(
                Bar(
                    x,
                    TOP + PLOT_H - height,
                    BAR - 1,
                    height,
                    index,
                    f"{names[index]}, position {position + 1}: {value:.0%}",
                )
            )
    positions = [(LEFT + p * group + group / 2, f"pos {p + 1}") for p in range(k)]
    grid = [(TOP + PLOT_H * (1 - f), f"{f:.0%}") for f in (0.0, 0.5, 1.0)]
    return Chart(width, TOP + PLOT_H + BOTTOM, bars, positions, grid, names)
