"""HTTP with a deadline for a whole answer, and TLS verified by the context it is given.

requests' read timeout counts the silence between two reads, so an answer trickling a byte at a
time never times out. A timer cuts the connections of the request in flight instead: `deadline`
watches the requests made inside it through a session from `watched_session`. That session
verifies TLS with the SSLContext given (registry/trust.py: the system store, the daemon's certs.d,
registry_ca), not with certifi's bundle or REQUESTS_CA_BUNDLE.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import requests
import urllib3

# requests' read timeout counts the silence between two reads, so an answer trickling a byte at a
# time never times out. A timer cuts the connections of the request in flight instead.

_in_flight = threading.local()


class _Watch:
    """The connections one request uses; `cut` shuts them down, ending any read in progress."""

    def __init__(self) -> None:
        self.connections: list[urllib3.connection.HTTPConnection] = []
        self.expired = False
        self._lock = threading.Lock()

    def attach(self, connection: urllib3.connection.HTTPConnection) -> None:
        with self._lock:
            self.connections.append(connection)
            if self.expired:
                _shut(connection)

    def cut(self) -> None:
        with self._lock:
            self.expired = True
            for connection in self.connections:
                _shut(connection)


def _shut(connection: urllib3.connection.HTTPConnection) -> None:
    sock = getattr(connection, "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's: also under TLS


if TYPE_CHECKING:
    _Connection = urllib3.connection.HTTPConnection
else:
    _Connection = object


class _Watched(_Connection):
    """A urllib3 connection that joins the watch of the request in flight on its thread."""

    def connect(self) -> None:
        super().connect()
        watch = getattr(_in_flight, "watch", None)
        if watch is not None:
            watch.attach(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        watch = getattr(_in_flight, "watch", None)
        if watch is not None and self.sock is not None:  # a kept-alive connection
            watch.attach(self)
        return super().request(*args, **kwargs)


class _HTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


class _WatchedAdapter(requests.adapters.HTTPAdapter):
    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        self.context = context  # what https is verified with; None: requests' own (certifi)
        super().__init__()

    def build_connection_pool_key_attributes(self, request: Any, verify: Any, cert: Any = None) -> Any:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        if self.context is not None and host_params.get("scheme") == "https":
            pool_kwargs = {"ssl_context": self.context, "cert_reqs": "CERT_REQUIRED"}
        return host_params, pool_kwargs

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        if self.context is None or not url.lower().startswith("https"):
            super().cert_verify(conn, url, verify, cert)  # else: the context alone decides, no bundle added

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

    def proxy_manager_for(self, *args: Any, **kwargs: Any) -> urllib3.PoolManager:
        manager = super().proxy_manager_for(*args, **kwargs)
        manager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}
        return manager


def watched_session(context: ssl.SSLContext | None = None) -> requests.Session:
    """A session whose connections a `deadline` can cut, verifying https with `context`."""
    session = requests.Session()
    adapter = _WatchedAdapter(context)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


@contextmanager
def deadline(seconds: float) -> Iterator[_Watch]:
    """Cut the connections of the requests made inside after `seconds`; `.expired` tells."""
    watch = _Watch()
    timer = threading.Timer(seconds, watch.cut)
    timer.daemon = True
    _in_flight.watch = watch
    timer.start()
    try:
        yield watch
    finally:
        timer.cancel()
        _in_flight.watch = None
