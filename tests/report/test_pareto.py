"""Pareto fronts on a hand-made point set."""

import math

from jalapeno.report.pareto import fronts_by_group, pareto_front


def test_front_maximize_both():
    # (x, y): A(1,10) B(2,8) C(2,5) dominated by B, D(3,8) dominates B, E(4,1), F(0.5,9) dominated by A
    xs = [1, 2, 2, 3, 4, 0.5]
    ys = [10, 8, 5, 8, 1, 9]
    assert pareto_front(xs, ys) == [0, 3, 4]


def test_front_minimize_y_and_nan_and_duplicates():
    # cost vs interactivity: higher x better, lower y better
    xs = [10, 20, 30, 30, 40, math.nan, 50]
    ys = [1.0, 2.0, 1.5, 1.5, 5.0, 0.1, None]
    # 10@1.0 is beaten by 30@1.5? no: 30 has higher x but higher cost -> both on front; 20@2.0 dominated by 30@1.5
    assert pareto_front(xs, ys, maximize_y=False) == [0, 2, 4]


def test_fronts_by_group():
    rows = [
        {"model": "m", "hardware": "a", "median_interactivity": 1, "y": 5},
        {"model": "m", "hardware": "a", "median_interactivity": 2, "y": 6},
        {"model": "m", "hardware": "b", "median_interactivity": 1, "y": 1},
        {"model": "m", "hardware": "b", "median_interactivity": 3, "y": None},
    ]
    f = fronts_by_group(rows, "y")
    assert [r["y"] for r in f[("m", "a")]] == [6]
    assert [r["y"] for r in f[("m", "b")]] == [1]
