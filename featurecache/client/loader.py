"""Ready-first execution: a bounded pool, a bounded reorder window, deadlines, failure records.

:class:`ReadyFirst` runs ``fn(item)`` for a stream of ``(seq, item)`` pairs (``seq`` strictly
increasing) on a pool of threads or processes and yields an outcome per item:

* :class:`Done` as soon as its result is ready — *ready first* — except that an item may be
  overtaken by at most ``window`` later items; once ``window`` later results have been yielded
  while it is still running, it is waited for (``window=0`` is strictly in order);
* :class:`Skipped` with ``reason="error"`` when ``fn`` raised (recorded, never retried), or
  ``reason="deadline"`` when it ran longer than ``deadline_s`` (abandoned: a process worker is
  killed and replaced; a thread cannot be killed, so it is retired — its late result is dropped —
  and a fresh thread takes its place).

At most ``workers + window`` items are dispatched and not yet yielded, so memory stays bounded.
The deadline is measured from the moment a worker starts the item, not from when it was sent.
A thread worker is given one item at a time, only when idle. A process worker holds
``PROCESS_DEPTH`` (2) items: the one it runs and the next, queued in its pipe, which it starts as
soon as it has sent a result (no round trip through the parent between samples); the parent
starts that item's clock when the result before it arrives. An item queued behind one that has run
``_RECLAIM_FACTOR`` times the median recent duration (a straggler) moves to a worker with room:
it is cancelled on the first worker (dropped unstarted, or, if that worker got to it first, its
late result is dropped), so no item waits behind a straggler while another worker has room, and
none is yielded twice. The items queued on a process that is killed or dies go to its replacement.

Process pools need ``fn`` and the items to be picklable; they cannot be started inside a
``torch.utils.data.DataLoader`` worker (daemonic processes have no children) — use threads there.

This module also holds :class:`ConsumedPositions` (the exact-resume bookkeeping) and
:class:`LoaderStats`.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import queue
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from typing import Any, Final

from featurecache.errors import InvalidRequest

log = logging.getLogger(__name__)

POOLS: Final[tuple[str, ...]] = ("thread", "process")
SKIP_ERROR: Final = "error"
SKIP_DEADLINE: Final = "deadline"
_STALE_WAIT_S: Final = 2.0


# ----------------------------------------------------------------------------------- outcomes
@dataclass
class Done:
    """``fn(item)`` returned ``value``. ``depth``: earlier items still unresolved when it was yielded."""

    seq: int
    item: Any
    value: Any
    elapsed_s: float
    depth: int = 0


@dataclass
class Skipped:
    """``item`` produced no value: ``reason`` is ``"error"`` (``fn`` raised) or ``"deadline"``."""

    seq: int
    item: Any
    reason: str
    error_class: str
    message: str
    elapsed_s: float


Outcome = Done | Skipped


# --------------------------------------------------------------------------------------- pools
#: tasks a process worker holds: the one it runs and, behind it, the next one, which it starts as
#: soon as it has sent a result instead of waiting for a round trip through the parent. 1: one
#: task at a time, dispatched only to idle workers (the behaviour before; kept for benchmarks).
PROCESS_DEPTH: int = 2
#: a task queued behind one that has run longer than this many times the median duration of
#: the last _RECENT tasks (at least _RECLAIM_FLOOR_S) moves to a worker with room
_RECLAIM_FACTOR: Final = 3.0
_RECLAIM_FLOOR_S: Final = 0.005
_RECENT: Final = 64
_TASK: Final = 0
_CANCEL: Final = 1


class _Pool:
    """Workers that run submitted tasks; the caller submits while :meth:`free` is positive.

    :meth:`get` returns ``(tid, ok, value or (error class, message), elapsed_s)``; elapsed from
    :meth:`started`, the moment the task's worker started it (None while it waits in a queue)."""

    retired: int = 0

    def free(self) -> int:
        raise NotImplementedError

    def submit(self, tid: int, item: Any) -> None:
        raise NotImplementedError

    def get(self, timeout: float | None) -> list[tuple[int, bool, Any, float]]:
        raise NotImplementedError

    def started(self, tid: int) -> float | None:
        raise NotImplementedError

    def wake_at(self) -> float | None:
        """When :meth:`get` has work of its own to do (move a queued task), if ever."""
        return None

    def abandon(self, tid: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _error_payload(exc: BaseException) -> tuple[str, str]:
    return type(exc).__name__, str(exc) or repr(exc)


class _ThreadPool(_Pool):
    """One task per thread at a time, dispatched to idle threads only (a hand-over between
    threads costs microseconds): a task starts when it is submitted."""

    def __init__(self, fn: Callable[[Any], Any], size: int) -> None:
        self._fn = fn
        self._size = size
        self.retired = 0
        self._next_wid = 0
        self._busy: dict[int, int | None] = {}  # live thread -> its tid, None when idle
        self._start: dict[int, float] = {}  # tid -> when submitted
        self._out: queue.Queue[tuple[int, int, bool, Any]] = queue.Queue()
        self._inbox: dict[int, queue.Queue[tuple[int, Any] | None]] = {}
        for _ in range(size):
            self._spawn()

    def _spawn(self) -> None:
        wid = self._next_wid
        self._next_wid += 1
        inbox: queue.Queue[tuple[int, Any] | None] = queue.Queue(maxsize=1)
        self._inbox[wid] = inbox
        self._busy[wid] = None
        t = threading.Thread(
            target=self._main, args=(wid, inbox), name=f"featurecache-ready-{wid}", daemon=True
        )
        t.start()

    def _main(self, wid: int, inbox: queue.Queue[tuple[int, Any] | None]) -> None:
        while True:
            task = inbox.get()
            if task is None:
                return
            tid, item = task
            try:
                msg: tuple[int, int, bool, Any] = (wid, tid, True, self._fn(item))
            except Exception as exc:
                log.debug("task %d raised:\n%s", tid, traceback.format_exc())
                msg = (wid, tid, False, _error_payload(exc))
            self._out.put(msg)

    def free(self) -> int:
        return sum(1 for t in self._busy.values() if t is None)

    def started(self, tid: int) -> float | None:
        return self._start.get(tid)

    def submit(self, tid: int, item: Any) -> None:
        wid = next(w for w, t in self._busy.items() if t is None)
        self._busy[wid] = tid
        self._start[tid] = time.monotonic()
        self._inbox[wid].put((tid, item))

    def get(self, timeout: float | None) -> list[tuple[int, bool, Any, float]]:
        msgs: list[tuple[int, int, bool, Any]] = []
        try:
            msgs.append(
                self._out.get(timeout=timeout) if timeout is None or timeout > 0 else self._out.get_nowait()
            )
            while True:
                msgs.append(self._out.get_nowait())
        except queue.Empty:
            pass
        out = []
        now = time.monotonic()
        for wid, tid, ok, payload in msgs:
            if wid in self._busy:  # a retired worker's late result is dropped
                self._busy[wid] = None
                out.append((tid, ok, payload, now - self._start.pop(tid, now)))
        return out

    def abandon(self, tid: int) -> None:
        wid = next((w for w, t in self._busy.items() if t == tid), None)
        if wid is None:
            return
        # The thread cannot be stopped: forget it (it exits after its task) and start another.
        del self._busy[wid]
        self._start.pop(tid, None)
        inbox = self._inbox.pop(wid)
        with contextlib.suppress(queue.Empty):  # a task the thread has not picked up yet is withdrawn
            inbox.get_nowait()
        inbox.put_nowait(None)
        self.retired += 1
        self._spawn()

    def close(self) -> None:
        for inbox in self._inbox.values():
            with contextlib.suppress(queue.Full):
                inbox.put_nowait(None)
        self._inbox.clear()
        self._busy.clear()
        self._start.clear()


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT held back in this thread meanwhile (delivered when the block ends). A process started
    meanwhile starts with it blocked: the mask survives fork and exec."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _process_main(fn: Callable[[Any], Any], conn: Connection) -> None:
    """Run the tasks that arrive on ``conn`` in order; one reply per task: ``(tid, True, value)``,
    ``(tid, False, (error class, message))``, or ``(tid, None, None)`` when a cancel for it came
    before the worker started it (messages: ``(_TASK, tid, item)``, ``(_CANCEL, tid)``, None = stop)."""
    # Ctrl-C reaches every process of the terminal's foreground group: the parent decides what it
    # means (``featurecache train`` finishes its step first) and shuts the pool down; a worker that
    # took it would die with a KeyboardInterrupt traceback of its own and lose its sample. The
    # worker was started with SIGINT blocked (_ProcessPool._spawn), through the seconds a spawned
    # interpreter takes to import ``fn``'s modules: ignoring it discards one that came meanwhile.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    pending: deque[tuple[int, Any]] = deque()

    def take(msg: Any) -> bool:
        """Queue a task or apply a cancel; False: stop."""
        if msg is None:
            return False
        if msg[0] == _CANCEL:
            # a cancel follows its task down the pipe: the task is pending, or already done
            hit = next((t for t in pending if t[0] == msg[1]), None)
            if hit is not None:
                pending.remove(hit)
                conn.send((msg[1], None, None))
        else:
            pending.append((msg[1], msg[2]))
        return True

    while True:
        try:
            if not pending and not take(conn.recv()):
                return
            while conn.poll():  # cancels that came meanwhile apply before the next task starts
                if not take(conn.recv()):
                    return
        except (EOFError, OSError):
            return
        if not pending:
            continue
        tid, item = pending.popleft()
        try:
            msg = (tid, True, fn(item))
        except Exception as exc:
            msg = (tid, False, _error_payload(exc))
        try:
            conn.send(msg)
        except Exception as exc:  # the value itself cannot be pickled
            conn.send((tid, False, _error_payload(exc)))


@dataclass(eq=False)
class _Task:
    """A task sent to a process worker. ``live`` False: abandoned or moved to another worker (its
    reply is dropped); ``start``: when it became the first unanswered task of its worker."""

    tid: int
    item: Any
    live: bool = True
    start: float | None = None


class _ProcessPool(_Pool):
    """One pipe per worker process, so killing a hung worker cannot corrupt a shared queue.

    Each worker holds up to ``depth`` tasks: the one it runs, then the ones queued in its pipe. The
    parent keeps each worker's unanswered tasks in order; the worker answers each task once, in
    order, so the first unanswered task is the one it runs, started (as far as the parent can
    tell) when the answer before it arrived, or when it was sent to a worker with nothing else.
    A queued task whose worker is stuck on a straggler moves to a worker with room: it is sent
    there and cancelled on the first worker, which drops it unstarted, or, if it had already
    started it, has its late answer dropped."""

    def __init__(
        self,
        fn: Callable[[Any], Any],
        size: int,
        context: str,
        depth: int = PROCESS_DEPTH,
        deadline_s: float | None = None,
    ) -> None:
        self._fn = fn
        self._ctx: Any = mp.get_context(context)
        self.depth = max(1, depth)
        self.deadline_s = deadline_s
        self.retired = 0
        self.moved = 0  # queued tasks moved off a worker stuck on a straggler
        self._next_wid = 0
        self._workers: dict[int, tuple[Any, Connection]] = {}
        self._tasks: dict[int, deque[_Task]] = {}  # worker -> its unanswered tasks, in order
        self._live: dict[int, tuple[int, _Task]] = {}  # tid -> (worker, task) of the caller's tasks
        self._recent: deque[float] = deque(maxlen=_RECENT)  # durations of the last tasks
        try:
            for _ in range(size):
                self._spawn()
        except BaseException:  # a Ctrl-C while they start: the ones started stop now, not at exit
            self.close()
            raise

    def _spawn(self) -> int:
        wid = self._next_wid
        self._next_wid += 1
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=_process_main, args=(self._fn, child), name=f"featurecache-ready-{wid}",
                                 daemon=True)  # fmt: skip
        # until the worker ignores SIGINT (a spawned one: after seconds of imports, under load) a
        # Ctrl-C killed it with a KeyboardInterrupt traceback, and its first sample was skipped as
        # WorkerDied; here a Ctrl-C meanwhile reaches this process when the block ends, the
        # worker registered (so that close() stops it). CPython starts its resource tracker the
        # same way (bpo-33613), and unblocks SIGINT after it: the tracker is started first.
        if self._ctx.get_start_method() == "spawn":
            resource_tracker.ensure_running()
        with _sigint_blocked():
            proc.start()
            child.close()
            self._workers[wid] = (proc, parent)
            self._tasks[wid] = deque()
        return wid

    def free(self) -> int:
        return sum(self.depth - len(q) for q in self._tasks.values())

    def started(self, tid: int) -> float | None:
        hit = self._live.get(tid)
        return hit[1].start if hit is not None else None

    def _send(self, wid: int, task: _Task) -> None:
        q = self._tasks[wid]
        if not q:
            task.start = time.monotonic()
        q.append(task)
        self._live[task.tid] = (wid, task)
        # a worker that died meanwhile: its pipe reads EOF in get(), which settles its tasks
        with contextlib.suppress(OSError):
            self._workers[wid][1].send((_TASK, task.tid, task.item))

    def _place(self, task: _Task, exclude: int | None = None) -> None:
        wid = min((w for w in self._tasks if w != exclude), key=lambda w: len(self._tasks[w]))
        self._send(wid, task)

    def submit(self, tid: int, item: Any) -> None:
        self._place(_Task(tid, item))

    def get(self, timeout: float | None) -> list[tuple[int, bool, Any, float]]:
        conns: dict[Any, int] = {self._workers[w][1]: w for w, q in self._tasks.items() if q}
        out: list[tuple[int, bool, Any, float]] = []
        for ready in wait(list(conns), timeout=timeout) if conns else ():
            wid = conns[ready]
            conn = self._workers[wid][1]
            while wid in self._workers:
                try:
                    msg: tuple[int, bool | None, Any] = conn.recv()
                except (EOFError, OSError) as exc:
                    # the worker died (crash, OOM kill): its task fails, a fresh worker replaces it
                    head = self._tasks[wid][0] if self._tasks[wid] else None
                    self._replace(wid)
                    if head is not None and head.live:
                        del self._live[head.tid]
                        out.append((head.tid, False, ("WorkerDied", f"worker process exited: {exc!r}"),
                                    time.monotonic() - (head.start or time.monotonic())))  # fmt: skip
                    break
                self._answered(wid, msg, out)
                if not conn.poll():
                    break
        self._rebalance()
        return out

    def _answered(
        self, wid: int, msg: tuple[int, bool | None, Any], out: list[tuple[int, bool, Any, float]]
    ) -> None:
        tid, ok, payload = msg
        q = self._tasks[wid]
        task = next((t for t in q if t.tid == tid), None)  # the first: answers come in order
        if task is None:
            return
        q.remove(task)
        now = time.monotonic()
        if q and q[0].start is None:
            q[0].start = now
        if not task.live or ok is None:
            return
        del self._live[tid]
        elapsed = now - (task.start if task.start is not None else now)
        self._recent.append(elapsed)
        out.append((tid, ok, payload, elapsed))

    def _straggle_s(self) -> float | None:
        if not self._recent:
            return None
        recent = sorted(self._recent)
        return max(_RECLAIM_FLOOR_S, _RECLAIM_FACTOR * recent[len(recent) // 2])

    def _room(self, exclude: int, now: float, limit: float) -> int | None:
        """A worker other than ``exclude`` with room, not itself on a straggler (fewest tasks)."""
        ok = [w for w, q in self._tasks.items() if w != exclude and len(q) < self.depth
              and not (q and q[0].start is not None and now - q[0].start > limit)]  # fmt: skip
        return min(ok, key=lambda w: len(self._tasks[w])) if ok else None

    def _stuck(self, now: float, limit: float) -> Iterator[tuple[int, _Task]]:
        """Queued live tasks behind a task that has run longer than ``limit``."""
        for wid, q in list(self._tasks.items()):
            if len(q) > 1 and q[0].start is not None and now - q[0].start > limit:
                yield from ((wid, t) for t in list(q)[1:] if t.live)

    def _rebalance(self) -> None:
        now = time.monotonic()
        if self.deadline_s is not None:  # a worker on an abandoned task past the deadline
            for wid, q in list(self._tasks.items()):
                if q and not q[0].live and q[0].start is not None and now - q[0].start > self.deadline_s:
                    self._replace(wid)
        limit = self._straggle_s()
        if limit is None or self.depth < 2:
            return
        for wid, task in list(self._stuck(now, limit)):
            dest = self._room(wid, now, limit)
            if dest is None:
                return
            task.live = False
            with contextlib.suppress(OSError):
                self._workers[wid][1].send((_CANCEL, task.tid))
            self._send(dest, _Task(task.tid, task.item))
            self.moved += 1

    def wake_at(self) -> float | None:
        now = time.monotonic()
        times: list[float] = []
        limit = self._straggle_s()
        if limit is not None and self.depth > 1:
            for wid, _task in self._stuck(now, limit):
                if self._room(wid, now, limit) is not None:
                    return now
            for q in self._tasks.values():  # one coming: a wake when it is due (one past waits for room)
                if (
                    len(q) > 1
                    and q[0].start is not None
                    and now < q[0].start + limit
                    and any(t.live for t in list(q)[1:])
                ):
                    times.append(q[0].start + limit)
        if self.deadline_s is not None:
            times += [q[0].start + self.deadline_s for q in self._tasks.values()
                      if q and not q[0].live and q[0].start is not None]  # fmt: skip
        return min(times, default=None)

    def _replace(self, wid: int) -> None:
        """Kill worker ``wid`` and start another; its queued live tasks (all but the one it ran)
        go to the workers with the fewest tasks."""
        proc, conn = self._workers.pop(wid)
        tasks = self._tasks.pop(wid)
        proc.kill()
        proc.join(timeout=5)
        conn.close()
        self.retired += 1
        self._spawn()
        for task in list(tasks)[1:]:
            if task.live:
                self._place(_Task(task.tid, task.item))

    def abandon(self, tid: int) -> None:
        hit = self._live.pop(tid, None)
        if hit is None:
            return
        wid, task = hit
        task.live = False
        if self._tasks[wid][0] is task:  # running: the worker is killed
            self._replace(wid)
        else:  # queued: withdrawn
            with contextlib.suppress(OSError):
                self._workers[wid][1].send((_CANCEL, tid))

    def close(self) -> None:
        for _proc, conn in self._workers.values():
            with contextlib.suppress(OSError, ValueError):
                conn.send(None)
        for proc, conn in self._workers.values():
            proc.join(timeout=2)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=2)
            conn.close()
        self._workers.clear()
        self._tasks.clear()
        self._live.clear()


# --------------------------------------------------------------------------------- ready-first
class ReadyFirst:
    """Run ``fn`` over a stream on a bounded pool; yield outcomes ready-first within a window.

    ``pool``: ``"thread"`` or ``"process"``; ``workers``: pool size; ``window``: how many later items
    may overtake an unfinished one (0 = in order); ``deadline_s``: seconds an item may run (None =
    no deadline); ``mp_context``: start method of a process pool.
    The pool starts lazily and persists across :meth:`run` calls until :meth:`close`.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        *,
        pool: str = "thread",
        workers: int = 2,
        window: int = 8,
        deadline_s: float | None = None,
        mp_context: str = "spawn",
    ) -> None:
        if pool not in POOLS:
            raise InvalidRequest(f"pool must be one of {POOLS}, got {pool!r}")
        if workers < 1 or window < 0:
            raise InvalidRequest(f"need workers >= 1 and window >= 0, got {workers}, {window}")
        if deadline_s is not None and deadline_s <= 0:
            raise InvalidRequest(f"deadline_s must be > 0 or None, got {deadline_s}")
        self.fn = fn
        self.pool_kind = pool
        self.workers = workers
        self.window = window
        self.deadline_s = deadline_s
        self.mp_context = mp_context
        self._pool: _Pool | None = None
        self._stale: set[int] = set()  # tids of an earlier run still on a worker

    def _get_pool(self) -> _Pool:
        if self._pool is None:
            if self.pool_kind == "thread":
                self._pool = _ThreadPool(self.fn, self.workers)
            else:
                self._pool = _ProcessPool(self.fn, self.workers, self.mp_context, depth=PROCESS_DEPTH,
                                          deadline_s=self.deadline_s)  # fmt: skip
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._stale.clear()

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()

    def run(self, items: Iterable[tuple[int, Any]]) -> Generator[Outcome, None, None]:
        pool = self._get_pool()
        self._drop_stale(pool)
        it = iter(items)
        exhausted = False
        running: dict[int, Any] = {}  # seq -> item, submitted (running or queued on a worker)
        overtaken: dict[int, int] = {}  # running seq -> later results yielded since it started
        ready: dict[int, Done] = {}
        cap = self.workers + self.window
        last_seq: int | None = None
        try:
            while True:
                while not exhausted and pool.free() > 0 and len(running) + len(ready) < cap:
                    try:
                        seq, item = next(it)
                    except StopIteration:
                        exhausted = True
                        break
                    if last_seq is not None and seq <= last_seq:
                        raise InvalidRequest(f"ReadyFirst needs increasing seq, got {seq} after {last_seq}")
                    last_seq = seq
                    pool.submit(seq, item)
                    running[seq] = item
                    overtaken[seq] = 0
                yielded = False
                while ready:
                    s = min(ready)
                    blockers = [t for t in running if t < s]
                    if any(overtaken[t] >= self.window for t in blockers):
                        break
                    done = ready.pop(s)
                    done.depth = len(blockers)
                    for t in blockers:
                        overtaken[t] += 1
                    yielded = True
                    yield done
                if yielded:
                    continue
                if not running:
                    if exhausted and not ready:
                        return
                    if not ready:
                        continue
                timeout = self._timeout(pool, running)
                for tid, ok, payload, elapsed in pool.get(timeout):
                    if tid not in running:
                        self._stale.discard(tid)
                        continue
                    item = running.pop(tid)
                    overtaken.pop(tid)
                    if ok:
                        ready[tid] = Done(tid, item, payload, elapsed)
                    else:
                        cls, msg = payload
                        log.warning("sample %d failed (%s: %s); skipped", tid, cls, msg)
                        yield Skipped(tid, item, SKIP_ERROR, cls, msg, elapsed)
                if self.deadline_s is not None:
                    now = time.monotonic()
                    for tid, item in list(running.items()):
                        start = pool.started(tid)  # a queued task's clock has not started
                        if start is not None and now - start > self.deadline_s:
                            pool.abandon(tid)
                            del running[tid]
                            del overtaken[tid]
                            msg = f"no result after {self.deadline_s:g} s; abandoned"
                            log.warning("sample %d: %s", tid, msg)
                            yield Skipped(tid, item, SKIP_DEADLINE, "DeadlineExceeded", msg, now - start)
        finally:
            # Whatever is still on a worker belongs to this run; its results must not leak into the next.
            self._stale.update(running)

    def _timeout(self, pool: _Pool, running: dict[int, Any]) -> float | None:
        due = [pool.wake_at()]
        if self.deadline_s is not None:
            due += [s + self.deadline_s for s in map(pool.started, running) if s is not None]
        first = min((d for d in due if d is not None), default=None)
        return None if first is None else max(0.0, first - time.monotonic()) + 1e-3

    def _drop_stale(self, pool: _Pool) -> None:
        """Tasks of a run the consumer stopped early: wait briefly for them, then abandon them."""
        if not self._stale:
            return
        for tid in [t for t in self._stale if pool.started(t) is None]:  # queued: withdrawn at once
            pool.abandon(tid)
            self._stale.discard(tid)
        end = time.monotonic() + min(self.deadline_s or _STALE_WAIT_S, _STALE_WAIT_S)
        while self._stale and time.monotonic() < end:
            for tid, _ok, _payload, _elapsed in pool.get(0.05):
                self._stale.discard(tid)
        for tid in list(self._stale):
            pool.abandon(tid)
        self._stale.clear()


# ------------------------------------------------------------------------------- exact resume
class ConsumedPositions:
    """The positions of one rank's share of the stream that are resolved (consumed or skipped).

    The share is ``{p : start <= p < stop, p % stride == offset}`` (``stop`` None = infinite).
    Kept as a watermark (every share position below it is resolved) plus the resolved positions
    above it — at most about pool size + window + DataLoader prefetch of them.
    """

    def __init__(self, start: int, stop: int | None, stride: int, offset: int) -> None:
        if stride < 1 or not 0 <= offset < stride:
            raise InvalidRequest(f"bad share: stride {stride}, offset {offset}")
        self.start, self.stop, self.stride, self.offset = start, stop, stride, offset
        self.watermark = self._first_at_or_after(start)
        self.above: set[int] = set()

    def _first_at_or_after(self, p: int) -> int:
        return p + (self.offset - p) % self.stride

    def in_share(self, p: int) -> bool:
        return p >= self.start and (self.stop is None or p < self.stop) and p % self.stride == self.offset

    def mark(self, p: int) -> None:
        if not self.in_share(p) or p < self.watermark:
            return
        self.above.add(p)
        while self.watermark in self.above:
            self.above.remove(self.watermark)
            self.watermark += self.stride

    def resolved(self, p: int) -> bool:
        return p < self.watermark or p in self.above

    def pending(self) -> Iterator[int]:
        """Share positions not yet resolved, increasing (infinite when ``stop`` is None)."""
        p = self.watermark
        while self.stop is None or p < self.stop:
            if p not in self.above:
                yield p
            p += self.stride

    def n_resolved(self) -> int:
        first = self._first_at_or_after(self.start)
        return max(0, (self.watermark - first) // self.stride) + len(self.above)

    def state(self) -> dict[str, Any]:
        return {"watermark": self.watermark, "resolved_above": sorted(self.above)}

    def load(self, state: dict[str, Any]) -> None:
        wm = int(state["watermark"])
        if not self.in_share(wm) and not (self.stop is not None and wm >= self.stop):
            raise InvalidRequest(f"watermark {wm} is not a position of this share")
        self.watermark = wm
        self.above = {int(p) for p in state.get("resolved_above", ())}


# ---------------------------------------------------------------------------------------- stats
@dataclass
class SkipRecord:
    position: int
    entry_id: str
    reason: str  # "error" | "deadline"
    error_class: str
    message: str
    elapsed_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"position": self.position, "entry_id": self.entry_id, "reason": self.reason,
                "error_class": self.error_class, "message": self.message, "elapsed_s": self.elapsed_s}  # fmt: skip


@dataclass
class LoaderStats:
    """Counters of the loader as the trainer sees it.

    ``wait_s``: per step (per sample when the dataset is iterated directly, per batch through
    :class:`~featurecache.client.dataset.FeatureLoader`), seconds the trainer waited for data;
    ``reorder_depth``: per sample, how many earlier samples were still unfinished when it was
    yielded; ``deadline_skips`` / ``failures``: samples abandoned at their deadline / that raised;
    ``skips``: the last ``max_records`` skip records. Long series keep the last ``max_series``.
    """

    max_series: int = 100_000
    max_records: int = 1000
    samples: int = 0
    steps: int = 0
    deadline_skips: int = 0
    failures: int = 0
    wait_s: deque[float] = field(default_factory=deque)
    reorder_depth: deque[int] = field(default_factory=deque)
    skips: deque[SkipRecord] = field(default_factory=deque)
    total_wait_s: float = 0.0
    max_wait_s: float = 0.0
    max_reorder_depth: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record_wait(self, seconds: float) -> None:
        with self._lock:
            self.steps += 1
            self.total_wait_s += seconds
            self.max_wait_s = max(self.max_wait_s, seconds)
            self.wait_s.append(seconds)
            if len(self.wait_s) > self.max_series:
                self.wait_s.popleft()

    def record_sample(self, depth: int) -> None:
        with self._lock:
            self.samples += 1
            self.max_reorder_depth = max(self.max_reorder_depth, depth)
            self.reorder_depth.append(depth)
            if len(self.reorder_depth) > self.max_series:
                self.reorder_depth.popleft()

    def record_skip(self, rec: SkipRecord) -> None:
        with self._lock:
            if rec.reason == SKIP_DEADLINE:
                self.deadline_skips += 1
            else:
                self.failures += 1
            self.skips.append(rec)
            if len(self.skips) > self.max_records:
                self.skips.popleft()

    def summary(self) -> dict[str, float | int]:
        with self._lock:
            waits = sorted(self.wait_s)
            depths = list(self.reorder_depth)
        return {
            "samples": self.samples,
            "steps": self.steps,
            "wait_mean_s": self.total_wait_s / self.steps if self.steps else 0.0,
            "wait_p50_s": _quantile(waits, 0.5),
            "wait_p95_s": _quantile(waits, 0.95),
            "wait_max_s": self.max_wait_s,
            "reorder_depth_mean": sum(depths) / len(depths) if depths else 0.0,
            "reorder_depth_max": self.max_reorder_depth,
            "deadline_skips": self.deadline_skips,
            "failures": self.failures,
        }

    def log(self, logger: logging.Logger | None = None, level: int = logging.INFO) -> None:
        s = self.summary()
        (logger or log).log(level, "loader: %s", " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                            for k, v in s.items()))  # fmt: skip

    def reset(self) -> None:
        with self._lock:
            self.samples = self.steps = self.deadline_skips = self.failures = 0
            self.total_wait_s = self.max_wait_s = 0.0
            self.max_reorder_depth = 0
            self.wait_s.clear()
            self.reorder_depth.clear()
            self.skips.clear()

    def __getstate__(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("_lock", None)
        return d

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    k = (len(sorted_values) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo)
