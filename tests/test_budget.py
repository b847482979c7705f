"""reader.loading.budget: the byte budget every streaming read takes from before it is launched and
gives back when the consumer is done: takers wait while they would not fit, in the order they asked;
a part bigger than the budget goes alone, with a warning; the setting is checked."""

from __future__ import annotations

import asyncio

import pytest

from reader.loading.budget import (
    DEFAULT_MAX_BUFFERED,
    ENVIRONMENT,
    Budget,
    BudgetWarning,
    Ledger,
    budget_bytes,
)

pytestmark = pytest.mark.unit


async def _started(coroutine) -> asyncio.Task:
    task = asyncio.ensure_future(coroutine)
    for _ in range(3):
        await asyncio.sleep(0)
    return task


async def test_takers_wait_until_their_bytes_fit() -> None:
    budget = Budget(100)
    await budget.take(60)
    waiting = await _started(budget.take(50))
    assert not waiting.done()
    budget.give(60)
    await waiting
    assert budget.held == 50 and budget.peak == 60


async def test_takers_are_served_in_order() -> None:
    budget = Budget(100)
    await budget.take(90)
    big = await _started(budget.take(80))
    small = await _started(budget.take(5))  # would fit now, but asked after the big one
    assert not big.done() and not small.done()
    budget.give(90)
    await asyncio.gather(big, small)
    assert budget.held == 85


async def test_a_part_bigger_than_the_budget_goes_alone_with_a_warning() -> None:
    budget = Budget(100)
    await budget.take(10)
    with pytest.warns(BudgetWarning, match="raised to that part, which is read alone"):
        alone = await _started(budget.take(300))
    assert not alone.done()
    budget.give(10)
    await alone
    after = await _started(budget.take(1))
    assert not after.done()  # nothing else while it is held
    budget.give(300)
    await after


async def test_a_cancelled_taker_leaves_nothing_held() -> None:
    budget = Budget(100)
    await budget.take(100)
    waiting = await _started(budget.take(50))
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    budget.give(100)
    assert budget.held == 0
    await budget.take(100)


async def test_a_range_is_given_back_when_its_last_storage_is_consumed() -> None:
    budget = Budget(100)
    ledger = Ledger(budget)
    await ledger.take(60, ["a", "b"])
    await ledger.take(30, ["c"])
    ledger.consumed(["a", "zeros"])  # a storage not charged is ignored
    assert budget.held == 90
    ledger.consumed(["b"])
    assert budget.held == 30
    ledger.release_all()
    assert budget.held == 0


@pytest.mark.parametrize("bad", [0, -5])
def test_zero_or_below_is_refused_naming_the_setting(bad, monkeypatch) -> None:
    with pytest.raises(ValueError, match="max_buffered must be a positive number of bytes"):
        budget_bytes(bad)
    monkeypatch.setenv(ENVIRONMENT, str(bad))
    with pytest.raises(ValueError, match=ENVIRONMENT):
        budget_bytes(None)


def test_the_setting_and_its_default(monkeypatch) -> None:
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    assert budget_bytes(None) == DEFAULT_MAX_BUFFERED <= 1 << 30
    monkeypatch.setenv(ENVIRONMENT, "1048576")
    assert budget_bytes(None) == 1 << 20
    assert budget_bytes(4096) == 4096  # the keyword wins
    monkeypatch.setenv(ENVIRONMENT, "lots")
    with pytest.raises(ValueError, match=f"{ENVIRONMENT}='lots' is not a number of bytes"):
        budget_bytes(None)
    with pytest.raises(TypeError, match="max_buffered is a number of bytes"):
        budget_bytes(1.5)  # type: ignore[arg-type]
