"""The case tables' routes (``case_routes`` in ``tests/route_table.py``): the default run spreads the
partitioned routes over a table's cases, and no route may drop out of a table by it."""

from __future__ import annotations

import pytest
from route_table import EXECUTORS, PARTITIONED, ROUTES, case_routes

TABLES = ["test_closed_forms", "test_tf_suite_cases", "test_tf_suite_cases2", "test_suite_cases3"]


@pytest.mark.parametrize("table", TABLES)
def test_every_route_runs_cases_of_every_table(table: str) -> None:
    """Each table, in the default run, has cases on every route, each case on the three executors
    and one partitioned route; the long run has every pair."""
    cases = __import__(table).CASES
    pairs = case_routes(cases, every_route=False)
    assert {route for _, route in pairs} == set(ROUTES)
    for name in cases:
        routes = {route for case, route in pairs if case == name}
        assert set(EXECUTORS) <= routes and len(routes & set(PARTITIONED)) == 1, name
    assert set(case_routes(cases, every_route=True)) == {(name, route) for name in cases for route in ROUTES}


def test_a_partitioned_route_takes_every_third_case_in_turn() -> None:
    """The partitioned routes go to the sorted cases in turn, so a case added shifts only those after it."""
    names = [f"c{k}" for k in range(7)]
    chosen = [route for name, route in case_routes(names, every_route=False) if route in PARTITIONED]
    assert chosen == [PARTITIONED[k % 3] for k in range(7)]
