"""How much of a body the kernel gathers before a socket read: the socket's low-water mark.

A read of a body waits until up to `GATHER` bytes of it are queued in the kernel (`SO_RCVLOWAT`,
which Linux honours in epoll and grows the receive buffer for), so a fast body costs one trip
through the event loop per MiB instead of one per ~170 KiB read found queued otherwise; a body that
arrives slower than that is read as it comes (`GATHER_WAIT` without a read lowers the mark to a
byte). Where the socket option is refused, bytes are read as they come.
"""

from __future__ import annotations

import asyncio
import socket

GATHER = 1 << 20
GATHER_WAIT = 0.002


class ReadMark:
    """The low-water mark of one connection's socket, set as its bodies arrive (on the loop)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.socket: socket.socket | None = None  # None: no socket offered (read as bytes come)
        self.gather = GATHER  # 0 where the socket option is refused
        self.lowat = 1  # the socket's SO_RCVLOWAT
        self.ceiling = 1  # the highest mark the receive buffer allows (_measure)
        self.timer: asyncio.TimerHandle | None = None
        self.read_lately = False  # a body read since the last check
        self.closed = False

    def read(self, remaining: int) -> None:
        """A read of a body happened; `remaining` bytes of it are still to come."""
        self.read_lately = True
        if remaining and self.gather and self.timer is not None:  # gathering already: the mark only
            size = min(self.gather, self.ceiling, remaining)
            if size != self.lowat:
                self._mark(size)
        else:
            self.follow(remaining)

    def follow(self, remaining: int) -> None:
        """The next read of the body waits for GATHER bytes, or all that is still to come."""
        if not remaining:
            self.stop()
            return
        if self.gather and self.timer is None:  # a body starts: how far?
            self._measure()
            if self.gather:  # the buffer's size was readable
                self.timer = self.loop.call_later(GATHER_WAIT, self._check)
        if not self.gather:
            self.stop()
            return
        self._mark(min(self.gather, self.ceiling, remaining))

    def stop(self) -> None:
        """Reads as bytes come (no body, or it ended, or went to a thread)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self._mark(1)

    def lost(self) -> None:
        """The connection is gone: no more marks."""
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _check(self) -> None:
        """Every GATHER_WAIT while a body arrives: if nothing was read meanwhile, read what is
        queued; and follow the receive buffer as TCP tunes it (one getsockopt per check, none per read)."""
        self.timer = None
        if self.closed:
            return
        if not self.read_lately:
            self._mark(1)
        self.read_lately = False
        self._measure()
        self.timer = self.loop.call_later(GATHER_WAIT, self._check)

    def _measure(self) -> None:
        """The mark's ceiling: a quarter of the socket's receive buffer. A mark the buffer cannot
        hold twice over makes Linux grow the buffer and clamp the TCP window to the mark, and a
        window no larger than what the reader waits for stops the sender at every read."""
        try:
            self.ceiling = max(1, self.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) // 4)  # type: ignore[union-attr]
        except (OSError, AttributeError):  # refused (or no socket): read as bytes come
            self.gather = 0

    def _mark(self, size: int) -> None:
        """Set the socket's low-water mark: a read happens once `size` bytes are queued."""
        if size == self.lowat or self.closed:
            return
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)  # type: ignore[union-attr]
        except (OSError, AttributeError):  # refused (or no socket): read as bytes come
            self.gather = 0
            return
        self.lowat = size
