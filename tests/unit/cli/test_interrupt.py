"""zkconsumer.cli.interrupt: the first Ctrl-C interrupts and arms a bounded exit, a second takes the default action.

Real SIGINTs are sent to this process (the handler runs in the main thread, as in the
command); the watchdog's exit and message are injected so that it cannot end pytest.
The processes' side (the command really ending) is tests/integration/test_cli_interrupt.py.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import CodeType
from typing import Iterator, List

import pytest

from zkconsumer.cli import interrupt
from zkconsumer.cli.interrupt import DEFAULT_GRACE_S, GRACE_ENV, InterruptPolicy, grace_from_environment


@pytest.fixture(autouse=True)
def sigint_restored() -> Iterator[None]:
    """SIGINT as in a terminal's foreground job for each test, whatever the suite was started with (a
    shell starts a background job with SIGINT ignored, and then the policy rightly installs nothing)."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def interrupt_self() -> None:
    """Send SIGINT to this process and give the main thread a chance to run its handler."""
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(100):
        time.sleep(0.01)


def test_first_ctrl_c_raises_keyboardinterrupt_and_the_watchdog_exits_130_after_the_grace() -> None:
    exits: List[int] = []
    messages: List[str] = []
    policy = InterruptPolicy(0.2, exit=exits.append, write_stderr=messages.append)
    try:
        with policy:
            assert policy.installed
            with pytest.raises(KeyboardInterrupt):
                interrupt_self()
            assert policy.interrupted
            assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL  # a second Ctrl-C: the kernel's default
        assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL  # kept after the command returns
        deadline = time.monotonic() + 10
        while not exits and time.monotonic() < deadline:
            time.sleep(0.01)
        assert exits == [130]
        assert messages == ["zkconsumer: interrupted; cleanup did not end within 0.2s, exiting without it\n"]
    finally:
        policy.cancel()


def test_a_command_that_ends_within_the_grace_is_not_cut_short() -> None:
    exits: List[int] = []
    policy = InterruptPolicy(0.5, exit=exits.append, write_stderr=lambda text: None)
    with policy:
        with pytest.raises(KeyboardInterrupt):
            interrupt_self()
    policy.cancel()  # what a finished process amounts to: the watchdog never fires
    # the watcher (the only caller of exit) has ended, so no exit can come later: no need to wait the grace out
    assert [t for t in threading.enumerate() if t.name == "zkconsumer-interrupt-watcher"] == []
    assert exits == []


def test_without_ctrl_c_the_previous_handler_is_restored_and_no_thread_started() -> None:
    previous = signal.getsignal(signal.SIGINT)
    with InterruptPolicy(5.0) as policy:
        assert signal.getsignal(signal.SIGINT) != previous
        watchers = [t for t in threading.enumerate() if t.name == "zkconsumer-interrupt-watcher"]
        assert len(watchers) == 1
    assert signal.getsignal(signal.SIGINT) == previous
    assert signal.set_wakeup_fd(-1) == -1  # restored too
    assert not policy.interrupted and not watchers[0].is_alive()


def blocked_on(thread_ident: int, code: CodeType, line: int) -> bool:
    """Whether ``thread_ident`` is executing ``line`` of ``code`` (its innermost Python frame)."""
    frame = sys._current_frames().get(thread_ident)
    return frame is not None and frame.f_code is code and frame.f_lineno == line


def test_a_sigint_caught_by_another_thread_still_interrupts_a_main_thread_blocked_on_a_lock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel may hand SIGINT to any thread; a main thread waiting on a lock without a timeout
    (as kazoo's synchronous calls wait for ZooKeeper) must still get its KeyboardInterrupt now.

    The signal is sent once the main thread is seen in ``lock.acquire()`` (its frame on that line
    in consecutive looks, each after giving up the GIL, so it is not merely waiting for the GIL to
    get there), and the wake-ups the watcher sends the main thread (the nudges) are counted: at
    least one was needed, so the interrupt came from the nudge, not from the main thread happening
    to run Python code."""
    nudges: List[int] = []
    monkeypatch.setattr(interrupt, "_ignore", lambda signum, frame: nudges.append(signum))
    exits: List[int] = []
    lock = threading.Lock()
    lock.acquire()
    rescued = threading.Event()

    def rescue_the_wait() -> None:  # if the policy failed, the wait would never end: end it, fail below
        rescued.set()
        lock.release()

    rescue = threading.Timer(20.0, rescue_the_wait)
    rescue.start()
    main = threading.get_ident()
    here = sys._getframe().f_code
    acquire_line = [0]  # the line of the blocking acquire() below, set before the thread starts

    def deliver_here_once_main_waits() -> None:
        seen = 0
        while seen < 3 and not rescued.is_set():
            seen = seen + 1 if blocked_on(main, here, acquire_line[0]) else 0
            time.sleep(0.01)  # gives up the GIL: a main thread still on its way would get there
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    other = threading.Thread(target=deliver_here_once_main_waits)
    policy = InterruptPolicy(60.0, exit=exits.append, write_stderr=lambda text: None)
    try:
        with policy:
            with pytest.raises(KeyboardInterrupt):
                acquire_line[0] = sys._getframe().f_lineno + 2
                other.start()  # the signal lands on that thread, not this one
                lock.acquire()
    finally:
        rescue.cancel()
        rescue.join(5)
        other.join(5)
        policy.cancel()
    assert not rescued.is_set(), "the main thread's wait was not interrupted: it ended only when the lock was freed"
    assert len(nudges) >= 1 and set(nudges) == {interrupt.NUDGE}, nudges
    assert exits == []


def test_an_ignored_sigint_stays_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job of a non-interactive shell
    with InterruptPolicy(5.0) as policy:
        assert not policy.installed
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_grace_from_environment() -> None:
    assert grace_from_environment({GRACE_ENV: "2.5"}) == 2.5
    assert grace_from_environment({}) == DEFAULT_GRACE_S
    for bad in ("", "0", "-1", "soon"):
        assert grace_from_environment({GRACE_ENV: bad}) == DEFAULT_GRACE_S
    with pytest.raises(ValueError):
        InterruptPolicy(0)
