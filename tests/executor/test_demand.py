"""Which kernels a pool keeps ready (:mod:`nbcast.executor.kernels.demand`): properties
over any sequence of runs of any kinds, and the cases the pool relies on."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from nbcast.executor.kernels.demand import Demand

KINDS = st.sampled_from(["a", "b", "c", "d", None])


@given(
    size=st.integers(0, 6), initial=st.lists(KINDS, max_size=3, unique=True), uses=st.lists(KINDS)
)
def test_wants_never_exceed_the_pool_and_the_latest_kind_is_wanted(
    size: int, initial: list[str | None], uses: list[str | None]
) -> None:
    demand: Demand[str | None] = Demand(size, initial)
    assert sum(demand.wanted(k) for k in demand.kinds()) <= size
    for kind in uses:
        demand.used(kind)
        total = sum(demand.wanted(k) for k in demand.kinds())
        assert total <= size
        assert all(demand.wanted(k) > 0 for k in demand.kinds())
        if size > 0:
            assert demand.wanted(kind) >= 1  # the kind a run just used gets a kernel back
            assert demand.kinds()[-1] == kind  # and is the most recently used
            assert total == size  # no unit is left idle once a kind was used


@given(size=st.integers(1, 6), uses=st.integers(1, 20))
def test_one_kind_in_use_gets_the_whole_pool(size: int, uses: int) -> None:
    demand: Demand[str | None] = Demand(size, [None])
    for _ in range(uses):
        demand.used("acme")
    assert demand.kinds() == ["acme"]
    assert demand.wanted("acme") == size


def test_a_kind_nobody_used_gives_all_its_units_to_the_first_kind_used() -> None:
    """A pool made with the unsandboxed default, serving a sandboxed worker, wastes no
    kernel on the default after the first run."""
    demand: Demand[str | None] = Demand(3, [None])
    assert demand.wanted(None) == 3
    demand.used("acme")
    assert (demand.wanted(None), demand.wanted("acme")) == (0, 3)


def test_a_new_kind_takes_one_unit_from_the_least_recently_used() -> None:
    demand: Demand[str | None] = Demand(3, [])
    demand.used("acme")
    demand.used("globex")
    assert (demand.wanted("acme"), demand.wanted("globex")) == (2, 1)
    demand.used("initech")
    assert (demand.wanted("acme"), demand.wanted("globex"), demand.wanted("initech")) == (1, 1, 1)
    demand.used("acme")
    demand.used("umbrella")  # globex is now the least recently used
    assert demand.wanted("globex") == 0
    assert (demand.wanted("acme"), demand.wanted("initech"), demand.wanted("umbrella")) == (1, 1, 1)


def test_a_pool_of_one_follows_the_tenant_that_ran_last() -> None:
    demand: Demand[str | None] = Demand(1, [])
    for kind in ("acme", "globex", "acme"):
        demand.used(kind)
        assert demand.kinds() == [kind]
        assert demand.wanted(kind) == 1


def test_a_pool_of_none_wants_nothing() -> None:
    demand: Demand[str | None] = Demand(0, [None])
    demand.used("acme")
    assert demand.kinds() == []
