"""The session's /dev/shm check (`conftest.nothing_left_in_dev_shm`) sees what it must see."""

from __future__ import annotations

import gc
import multiprocessing

import pytest
from conftest import SEMAPHORE_PREFIX, SHM, owned_shm_entries

pytestmark = pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm on this system")


def child_lock_name(results) -> None:
    lock = multiprocessing.get_context("spawn").Lock()
    results.put(lock._semlock.name)


def test_the_session_owns_the_semaphores_of_its_queues_and_of_its_childrens():
    before = owned_shm_entries()
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    created = owned_shm_entries() - before
    # a queue's two locks and its bounded semaphore, named for this session
    assert len(created) == 3
    child = context.Process(target=child_lock_name, args=(results,))
    child.start()
    # a child's locks inherit the prefix
    assert results.get(timeout=60).startswith(f"/{SEMAPHORE_PREFIX}-")
    child.join(60)
    results.close()
    results.join_thread()
    del results
    gc.collect()
    # a dropped queue leaves nothing (gc may free older ones too)
    assert not owned_shm_entries() & created
