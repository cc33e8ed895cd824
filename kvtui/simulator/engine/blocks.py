"""The simulator's KV block pool and its requests' block bookkeeping (vLLM's free block queue).

Free blocks form one LRU queue: freed blocks keep their hash and can be hit by a later prompt
until they are reallocated, oldest-freed first. A request's full prompt blocks are keyed by
the client's chained block hashes (prefix caching) or, without them, by per-request keys.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

_HASH_MASK = (1 << 63) - 1

# A full block's cache key: the client's chained prompt-block hash, or (request uid, block index)
# for blocks nobody else can share (no hashes sent, or the blocks past the hashed prompt).
BlockKey = int | tuple[int, int]


@dataclass
class SimRequest:
    rid: str
    prompt_tokens: int
    max_tokens: int
    block_hashes: list[int] | None = None  # chained hashes of the prompt's full blocks (None: no caching)



class SimSeq:
    """One request as the scheduler tracks it: tokens computed and emitted, its blocks and their keys."""

    __slots__ = (
        "rid", "prompt", "max_tokens", "hashes", "nh", "uid", "out", "num_tokens", "computed",
        "nblocks", "keys", "arrival", "caching", "done",
    )

    def __init__(self, req: SimRequest, uid: int, now: float, caching: bool):
        self.rid = req.rid
        self.prompt = int(req.prompt_tokens)
        self.max_tokens = int(req.max_tokens)
        self.caching = caching and req.block_hashes is not None
        # Typed as keys (they are ints) because slices of it start a request's key lists.
        self.hashes: list[BlockKey] = (
            [h & _HASH_MASK for h in req.block_hashes] if (caching and req.block_hashes is not None) else []
        )
        self.nh = len(self.hashes)  # 0 without caching: every block gets a per-request key
        self.uid = uid
        self.out = 0
        self.num_tokens = self.prompt  # tokens known (prompt + sampled)
        self.computed = 0  # tokens whose KV is in the cache
        self.nblocks = 0
        self.keys: list[BlockKey] = []  # cache keys of the blocks this request holds as registered
        self.arrival = now
        self.done = False

    def key(self, j: int) -> BlockKey:
        """Cache key of full block j: the client's prompt hash, else a per-request synthetic key."""
        if j < self.nh:
            return self.hashes[j]
        return (self.uid, j)

    def keys_range(self, a: int, b: int) -> list[BlockKey]:
        nh = self.nh
        if b <= nh:
            return self.hashes[a:b]
        out: list[BlockKey] = self.hashes[a:nh] if a < nh else []
        uid = self.uid
        out.extend((uid, j) for j in range(max(a, nh), b))
        return out


class BlockPool:
    """KV blocks: never-used blocks, then vLLM's free queue (FIFO: oldest-freed reused first).

    Freed blocks keep their hash until reallocated, so they can still be hit. Bookkeeping is
    lazy so that a step costs O(requests), not O(blocks): every freed block takes the next
    position of the free queue; allocating n blocks advances the eviction pointer `ptr` by n
    positions (skipping "holes": free cached blocks that were hit and left the queue). `cached`
    maps a key to its ref count (> 0, in use) or to -(position + 1) (free; evicted once the
    pointer has passed that position).
    """

    __slots__ = ("total", "never_used", "seq", "ptr", "holes", "n_holes", "cached")

    def __init__(self, usable_blocks: int):
        self.total = usable_blocks
        self.never_used = usable_blocks
        self.seq = 0  # positions handed out to freed blocks so far
        self.ptr = 0  # positions consumed by allocation (evicted or reused)
        self.holes: list[int] = []  # heap of queue positions whose block left the queue by a hit
        self.n_holes = 0
        self.cached: dict[BlockKey, int] = {}

    @property
    def free(self) -> int:
        return self.never_used + self.seq - self.ptr - self.n_holes

    def alloc(self, n: int) -> None:
        nu = self.never_used
        if n <= nu:
            self.never_used = nu - n
            return
        self.never_used = 0
        target = self.ptr + n - nu
        holes = self.holes
        while holes and holes[0] < target:
            heapq.heappop(holes)
            self.n_holes -= 1
            target += 1
        self.ptr = target

    def lookup(self, k: BlockKey) -> int:
        """1: in use, 0: free but cached (evictable), -1: not cached."""
        v = self.cached.get(k)
        if v is None:
            return -1
        if v > 0:
            return 1
        if -v - 1 >= self.ptr:
            return 0
        del self.cached[k]  # evicted long ago: forget it
        return -1

    def touch(self, k: BlockKey) -> None:
        """A hit: the block is in use by one more request (leaves the free queue if it was free)."""
        v = self.cached[k]
        if v > 0:
            self.cached[k] = v + 1
        else:
            heapq.heappush(self.holes, -v - 1)
            self.n_holes += 1
            self.cached[k] = 1

    def register(self, r: SimSeq, keys: list[BlockKey]) -> None:
        """Blocks that just became full: cache their keys (first writer wins)."""
        cached = self.cached
        if cached.keys().isdisjoint(keys):
            cached.update(dict.fromkeys(keys, 1))
            r.keys.extend(keys)
            return
        ptr = self.ptr
        for k in keys:
            v = cached.get(k)
            if v is None or (v <= 0 and -v - 1 < ptr):
                cached[k] = 1
                r.keys.append(k)

    def release(self, r: SimSeq) -> None:
        """Free a request's blocks, tail first (vLLM frees in reverse so the prefix survives longest)."""
        keys = r.keys
        anon = r.nblocks - len(keys)
        self.seq += anon  # unhashed blocks: positions nobody can hit
        if keys:
            cached = self.cached
            vals = list(map(cached.__getitem__, keys))
            if max(vals) == 1:  # nobody else holds them: all go to the free queue
                n = len(keys)
                s0 = self.seq
                cached.update(zip(reversed(keys), range(-s0 - 1, -s0 - 1 - n, -1)))
                self.seq = s0 + n
            else:
                for k, v in zip(reversed(keys), reversed(vals)):
                    if v > 1:
                        cached[k] = v - 1
                    else:
                        self.seq += 1
                        cached[k] = -self.seq
            if len(cached) > 4 * self.total + 1024:
                self._compact()
        r.keys = []
        r.nblocks = 0

    def _compact(self) -> None:
        # In place: SchedulerSim.step() holds a reference to this dict for its inline
        # registrations, and a release (a preemption) can compact in the middle of a step.
        # Rebinding lost those keys, and a later release raised KeyError (found by
        # bench/search_efficiency.py's sweep of sim-demo).
        ptr = self.ptr
        cached = self.cached
        for k in [k for k, v in cached.items() if v <= 0 and -v - 1 < ptr]:
            del cached[k]
