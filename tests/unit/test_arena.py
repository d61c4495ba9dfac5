import numpy as np
import pytest

from service.shared.arena import ALIGNMENT, Arena, ArenaFull, Region, align_up


def test_slots_are_256_byte_aligned_addresses_and_never_overlap():
    arena = Arena(1 << 20)
    leases = [arena.allocate(n) for n in (1, 255, 256, 257, 1000, 0)]
    spans = []
    for lease in leases:
        assert (arena.region.address + lease.offset) % ALIGNMENT == 0
        assert lease.size == align_up(max(lease.size, 1))
        spans.append((lease.offset, lease.offset + lease.size))
    spans.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert arena.in_use == sum(lease.size for lease in leases)


def test_a_full_arena_refuses_and_takes_requests_again_once_freed():
    arena = Arena(64 * 1024)
    first = arena.allocate(48 * 1024)
    with pytest.raises(ArenaFull):
        arena.allocate(32 * 1024)
    first.release()
    assert arena.in_use == 0
    assert arena.free_extents() == [(0, arena.size)]
    arena.allocate(32 * 1024).release()


def test_freed_neighbours_coalesce_so_fragmentation_heals():
    arena = Arena(16 * 4096)
    slots = [arena.allocate(4096) for _ in range(16)]
    with pytest.raises(ArenaFull):
        arena.allocate(1)
    for slot in slots[::2]:  # every other one: 8 holes of one page
        slot.release()
    with pytest.raises(ArenaFull):
        arena.allocate(2 * 4096)  # fragmented: no two free pages side by side
    for slot in slots[1::2]:
        slot.release()
    assert arena.free_extents() == [(0, arena.size)]
    assert arena.allocate(16 * 4096).size == arena.size


def test_a_lease_is_freed_by_its_last_holder_only():
    arena = Arena(1 << 16)
    lease = arena.allocate(1000)
    lease.retain()
    lease.release()
    assert arena.in_use == lease.size
    lease.release()
    assert arena.in_use == 0


def test_the_engine_sees_what_the_front_wrote_through_its_own_mapping():
    arena = Arena(1 << 16)
    lease = arena.allocate(16 * 4)
    mine = arena.region.array(lease.offset, np.dtype(np.float32), (4, 4))
    mine[...] = np.arange(16, dtype=np.float32).reshape(4, 4)
    theirs = Region(arena.fd, arena.size)  # as the engine maps the memfd it was passed
    assert np.array_equal(theirs.array(lease.offset, np.dtype(np.float32), (4, 4)), mine)
    theirs.array(lease.offset, np.dtype(np.float32), (4, 4))[0, 0] = 42.0
    assert mine[0, 0] == 42.0
    assert arena.region.offset_of(mine) == lease.offset
    assert arena.region.offset_of(np.zeros(4)) is None
