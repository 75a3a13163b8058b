"""A Ctrl-C inside a measurement's event loop is raised once and never logged again.

Seen on the GPU: the interrupt gate's KeyboardInterrupt ended the request task, the study said
"interrupted", and then asyncio printed "Task exception was never retrieved" and a traceback.
"""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from autotune.engines.event_loop import run_to_end

UNREAD = "exception was never retrieved"


async def interrupted_request() -> None:
    await asyncio.sleep(0)
    raise KeyboardInterrupt  # what the interrupt gate's SIGINT handler raises


async def measurement_in_the_main_task() -> int:
    await interrupted_request()
    return 1


async def measurement_with_request_tasks() -> list[None]:
    return await asyncio.gather(asyncio.sleep(0.5), interrupted_request())


@pytest.mark.parametrize(
    "measurement", [measurement_in_the_main_task, measurement_with_request_tasks]
)
def test_an_interrupt_is_raised_once_and_not_logged_as_unread(
    measurement, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    with pytest.raises(KeyboardInterrupt):
        run_to_end(measurement())
    gc.collect()
    assert [record.getMessage() for record in caplog.records if record.name == "asyncio"] == []


def test_the_plain_event_loop_logs_it_so_the_test_above_can_fail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="asyncio")
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(measurement_with_request_tasks())
    gc.collect()
    assert UNREAD in caplog.text


async def answered() -> list[int]:
    async def one(value: int) -> int:
        await asyncio.sleep(0)
        return value

    return await asyncio.gather(one(1), one(2))


async def failed() -> None:
    await asyncio.sleep(0)
    raise TimeoutError("requests timed out")


def test_a_measurement_returns_its_value_and_raises_its_own_errors() -> None:
    assert run_to_end(answered()) == [1, 2]
    with pytest.raises(TimeoutError, match="requests timed out"):
        run_to_end(failed())
