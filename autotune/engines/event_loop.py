"""Run one measurement's coroutine to its end, and let Ctrl-C stop it with one message.

The study's interrupt gate (autotune/study/run/interrupts.py) raises KeyboardInterrupt from its
own SIGINT handler, so asyncio's handler, which would cancel the running task cleanly, is not
installed. The KeyboardInterrupt then ends whichever task was running, leaves the event loop
and reaches the study, but the task keeps it as its exception; nothing reads it there, so when
the task is collected asyncio logs "Task exception was never retrieved" with a traceback,
after the study has already said it was interrupted. `run_to_end` reads it off every such task.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_to_end(coroutine: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coroutine)`; a KeyboardInterrupt inside it is raised once, never logged."""
    created: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    def tracking_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        created.add(task)
        return task

    try:
        with asyncio.Runner() as runner:
            runner.get_loop().set_task_factory(tracking_factory)
            return runner.run(coroutine)
    except KeyboardInterrupt:
        # After the runner has closed: closing cancels the tasks still running, and a parent
        # whose child was interrupted (asyncio.gather) only then ends, with the same exception.
        for task in list(created):
            if task.done() and not task.cancelled():
                task.exception()  # read: asyncio logs only the ones nobody read
        raise
