"""A TCP proxy for fault tests: it sits on 127.0.0.1 (a random port) between the product and a
database server, forwards every byte both ways, and, when armed, loses one reply on the way back.

``drop_reply(b"COMMIT", after=b"group_counts")`` arms it once: on the first connection that sends
``after`` and then ``trigger``, the request still reaches the server, the server's reply is read
(so the server has acted on the request: a COMMIT has committed) and thrown away, and both sockets
are closed. The client sees its connection drop while it waits for the answer, exactly like a
network cut between the server's commit and its reply. ``fired`` is set when that happened.

``freeze(after=b"...")`` stops forwarding, as a server stopped by SIGSTOP or a silent network
would: once a connection has sent ``after`` (at once when it is empty), no byte moves on any
connection any more, new ones included, yet every socket stays open, so TCP keeps acknowledging
and keepalives keep answering. ``frozen`` is set when that happened. It is a partition that drops
packets (never refuses or resets them): neither end is told. ``thaw()`` heals it: the bytes held
at the cut (the request that met it) go on first, as TCP's retransmission would deliver them, and
forwarding resumes; a connection the server ended meanwhile then ends for its client too.
``freeze(after, deliver=True)`` lets the request that meets the cut reach the server first: the
server acts on it (a query runs and its rows are sent) and only its answer is lost.

Everything is bounded: sockets poll with short timeouts, the proxy stops itself after
``lifetime`` seconds, and ``close()`` (or leaving the ``with`` block) stops it at once.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from types import TracebackType
from typing import Self

from sqlalchemy.engine import make_url

POLL = 0.2  # seconds between checks of the stop flag
WINDOW = 1 << 16  # bytes of a connection's traffic kept to find a marker split across reads


class FaultProxy:
    """A forwarding proxy to ``host:port`` that can drop one reply (see the module docstring)."""

    def __init__(self, host: str, port: int, lifetime: float = 120.0):
        self.target = (host, port)
        self.fired = threading.Event()
        self._deadline = time.monotonic() + lifetime
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._armed: tuple[bytes, bytes] | None = None
        self.frozen = threading.Event()
        self._freeze_after: bytes | None = None
        self._deliver = False
        self.frozen_at = 0.0  # time.monotonic() when the partition last began
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(POLL)
        self.port: int = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def url(self, url: str) -> str:
        """``url`` (a database URL) pointed at this proxy instead of its server."""
        parsed = make_url(url).set(host="127.0.0.1", port=self.port)
        return parsed.render_as_string(hide_password=False)

    def drop_reply(self, trigger: bytes, after: bytes = b"") -> None:
        """Arm once: lose the server's reply to the first ``trigger`` a connection sends after
        it sent ``after``, then cut that connection."""
        with self._lock:
            self._armed = (trigger, after)
        self.fired.clear()

    def freeze(self, after: bytes = b"", deliver: bool = False) -> None:
        """Stop forwarding on every connection once one has sent ``after``; with ``deliver``
        the request that sent it still reaches the server (its answer is what the partition
        loses), else it is held until ``thaw()``."""
        with self._lock:
            self._freeze_after = after
            self._deliver = deliver
        if not after:
            self.frozen_at = time.monotonic()
            self.frozen.set()

    def thaw(self) -> None:
        """Heal the partition: forward again, starting with what each connection held."""
        with self._lock:
            self._freeze_after = None
        self.frozen.clear()

    def _watch_freeze(self, sent: bytes) -> None:
        with self._lock:
            if self._freeze_after is not None and self._freeze_after in sent:
                self.frozen_at = time.monotonic()
                self.frozen.set()

    def _stopped(self) -> bool:
        return self._stop.is_set() or time.monotonic() > self._deadline

    def _accept(self) -> None:
        while not self._stopped():
            try:
                client, _ = self._listener.accept()
            except OSError:  # the poll timed out, or the listener is closed
                continue
            thread = threading.Thread(target=self._pump, args=(client,), daemon=True)
            self._threads.append(thread)
            thread.start()
        self._listener.close()

    def _take(self, tail: bytes) -> tuple[bytes, bool]:
        """Follow the armed fault on one connection: ``tail`` is what it sent since it sent
        ``after`` (else its recent bytes). Returns the new tail and whether the fault goes off now
        (which disarms it)."""
        with self._lock:
            if self._armed is None:
                return tail[-WINDOW:], False
            trigger, after = self._armed
            at = tail.find(after)
            if at < 0:
                return tail[-WINDOW:], False
            if tail.find(trigger, at + len(after)) < 0:  # keep the marker at the head
                return after + tail[at + len(after) :][-WINDOW:], False
            self._armed = None
            return b"", True

    def _pump(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
        tail, dropping, held = b"", False, b""
        with client, server, contextlib.suppress(OSError):  # a reset ends the connection
            while not self._stopped():
                if self.frozen.is_set():  # nothing read, nothing sent: the sockets stay open
                    time.sleep(POLL)
                    continue
                if held:  # healed: what met the partition arrives first
                    server.sendall(held)
                    held = b""
                ready, _, _ = select.select([client, server], [], [], POLL)
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    self._watch_freeze(tail[-WINDOW:] + data)
                    if self.frozen.is_set():
                        if self._deliver:  # it reached the server; no answer comes back
                            server.sendall(data)
                        else:
                            held = data  # this request is held in the frozen network
                        continue
                    server.sendall(data)
                    if not dropping:
                        tail, dropping = self._take(tail + data)
                if server in ready:
                    data = server.recv(65536)
                    if not data:
                        return
                    if dropping:  # the server answered: it acted; the client never hears it
                        self.fired.set()
                        return
                    client.sendall(data)

    def close(self) -> None:
        self._stop.set()
        self._threads[0].join(timeout=5)  # no connection starts after the accept loop ends
        for thread in self._threads[1:]:
            thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
