"""Deadline: asyncio.timeout's behaviour on the hot path, with one shared timer per loop."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from taskstate.proto.versions import new_generation
from taskstate.sidecar import deadline as dl
from taskstate.sidecar.deadline import Deadline


def test_a_block_that_ends_in_time_returns_its_value_and_leaves_no_deadline_behind() -> None:
    async def main() -> tuple[int, int]:
        with Deadline(5) as d:
            await asyncio.sleep(0.01)
            value = 7
        assert not d.expired
        return value, len(dl._watch().live)

    assert asyncio.run(main()) == (7, 0)


def test_a_block_past_its_deadline_ends_in_timeout_error_soon_after() -> None:
    async def main() -> float:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError), Deadline(0.05):
            await asyncio.sleep(10)
        return time.monotonic() - t0

    took = asyncio.run(main())
    assert 0.05 <= took < 0.05 + 10 * dl.TICK_S, took


def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def victim(started: asyncio.Event) -> None:
        with Deadline(10):
            started.set()
            await asyncio.sleep(10)

    async def main() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(victim(started))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    asyncio.run(main())


def test_the_inner_of_two_deadlines_that_expires_is_the_one_that_raises() -> None:
    async def main() -> list[str]:
        seen = []
        with Deadline(10) as outer:
            try:
                with Deadline(0.02):
                    await asyncio.sleep(10)
            except TimeoutError:
                seen.append("inner")
            await asyncio.sleep(0.02)  # the outer one still holds: nothing more is cancelled
            seen.append("outer went on")
        assert not outer.expired
        return seen

    assert asyncio.run(main()) == ["inner", "outer went on"]


def test_the_outer_deadline_expiring_is_not_taken_for_the_inner() -> None:
    async def main() -> str:
        try:
            with Deadline(0.02):
                with Deadline(10) as inner:
                    await asyncio.sleep(10)
        except TimeoutError:
            assert not inner.expired
            return "outer"
        return "none"

    assert asyncio.run(main()) == "outer"


def test_each_new_event_loop_in_the_same_thread_gets_its_own_watch() -> None:
    """asyncio.run twice in one thread (a test suite's pattern): the second loop's
    deadlines run on the second loop, not on the closed first."""

    async def one() -> asyncio.AbstractEventLoop:
        with pytest.raises(TimeoutError), Deadline(0.01):
            await asyncio.sleep(10)
        return dl._watch().loop

    first = asyncio.run(one())
    second = asyncio.run(one())
    assert first is not second


def test_no_deadline_means_none() -> None:
    async def main() -> bool:
        with Deadline(None) as d:
            await asyncio.sleep(0.02)
        return d.expired

    assert asyncio.run(main()) is False


def test_outside_a_task_is_an_error() -> None:
    loop = asyncio.new_event_loop()
    try:

        async def main() -> None:
            # a loop runs, but this callback is not a task
            def cb() -> None:
                with pytest.raises(RuntimeError, match="inside an asyncio task"), Deadline(1):
                    pass

            asyncio.get_running_loop().call_soon(cb)
            await asyncio.sleep(0.01)

        loop.run_until_complete(main())
    finally:
        loop.close()


def test_generations_are_unique_and_a_forked_child_draws_its_own() -> None:
    gens = {new_generation() for _ in range(10_000)}
    assert len(gens) == 10_000
    assert all(len(g) == 32 and int(g, 16) >= 0 for g in gens)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first generation
        os.write(w, new_generation().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.waitpid(pid, 0)
    os.close(r)
    mine = new_generation()
    assert child[:16] != mine[:16]  # another random half
    assert child not in gens
