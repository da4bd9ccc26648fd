"""adapters/dialect.py `shared_load`'s registry is held per event loop, by the loop itself:
a loop's readers go when the loop goes, and a later loop (tests make many; CPython may give
it a dead loop's id) reads afresh instead of finding the dead loop's reader, its lock
and its last snapshot."""

from __future__ import annotations

import asyncio
import gc
import weakref

from adapters.base import LoadSnapshot
from adapters.dialect import SharedLoad, shared_load

URL = "http://shared-load-loops.test:1"


class _Reader:
    base_url = URL

    async def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        raise AssertionError("the read function is scripted, nothing GETs")


async def _read_once(reads: list[weakref.ref[SharedLoad]]) -> LoadSnapshot:
    async def read(http, reader: SharedLoad) -> LoadSnapshot:
        reads.append(weakref.ref(reader))
        reader.last = LoadSnapshot(waiting=len(reads))
        reader.read_at = 1e18  # fresh for as long as the reader lives
        return reader.last

    return await shared_load(_Reader(), 3600.0, SharedLoad, read)


def test_a_closed_loops_readers_go_with_it_and_a_new_loop_reads_afresh():
    reads: list[weakref.ref[SharedLoad]] = []
    for n in (1, 2, 3):
        loop = asyncio.new_event_loop()
        try:
            # within the interval on one loop: one read, the snapshot shared
            assert loop.run_until_complete(_read_once(reads)).waiting == n
            assert loop.run_until_complete(_read_once(reads)).waiting == n
            assert reads[-1]() is not None  # kept while its loop lives
        finally:
            loop.close()
        del loop
        gc.collect()
        assert reads[-1]() is None  # gone with its loop: nothing a later loop could find
    assert len(reads) == 3
