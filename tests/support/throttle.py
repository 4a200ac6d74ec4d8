"""A throttling TCP proxy on loopback: a slow link in front of a real service (the registry), so
that a test can watch a push take its time. Bytes towards the service pass at most `rate` a
second, over all connections together; answers come back at full speed."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

CHUNK = 16 * 1024
BUFFER = 64 * 1024  # the proxy's receive buffer: small, so a sender cannot run far ahead of the link


class _Pace:
    """`rate` bytes a second, shared: each chunk waits for its turn."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.next = time.monotonic()
        self.lock = threading.Lock()

    def wait(self, size: int) -> None:
        with self.lock:
            now = time.monotonic()
            self.next = max(self.next, now)
            delay = self.next - now
            self.next += size / self.rate
        if delay > 0:
            time.sleep(delay)


class ThrottlingProxy:
    """Listens on a free port of 127.0.0.1 and forwards each connection to `upstream` (host, port).
    Use it as a context manager; `address` is host:port."""

    def __init__(self, upstream: tuple[str, int], rate: int) -> None:
        self.upstream = upstream
        self.pace = _Pace(rate)
        self.sent = 0  # bytes forwarded towards the service
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)  # accepted sockets inherit it
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.2)  # to see `closing` soon
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.closing = False
        self._start(self._accept)

    def _start(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self.closing:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self.sockets += [client, server]
            self._start(self._pump, client, server, True)
            self._start(self._pump, server, client, False)

    def _pump(self, source: socket.socket, dest: socket.socket, throttled: bool) -> None:
        try:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                if throttled:
                    self.pace.wait(len(data))
                    self.sent += len(data)
                dest.sendall(data)
        except OSError:
            pass
        finally:
            for sock, how in ((dest, socket.SHUT_WR), (source, socket.SHUT_RD)):
                with contextlib.suppress(OSError):
                    sock.shutdown(how)

    def close(self) -> None:
        self.closing = True
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self.threads:
            thread.join(5)

    def __enter__(self) -> ThrottlingProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
