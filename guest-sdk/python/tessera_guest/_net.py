"""Outgoing network access from a guest: none is granted.

A Triton model may call out (`requests.get(...)` to a local service, its server's `/metrics`); a
Tessera guest has no network grant yet, so such a call must fail at once and say why, not with a
name-lookup or socket error that reads like a network fault. `install()` (run at build time, after
the user's modules are imported) makes every way out of the guest raise
`PermissionError(EACCES, MESSAGE)`:

- urllib3's `create_connection` (what requests uses): requests then raises
  `requests.exceptions.ConnectionError` whose message holds MESSAGE;
- `socket.create_connection`, `socket.getaddrinfo` and `socket.socket.connect` (http.client,
  urllib.request and raw sockets).
"""

import errno

MESSAGE = ("outgoing HTTP is not granted to this model: a Tessera guest has no network access "
           "(its host grants none), so the connection to %s was refused inside the guest")


def _where(address):
    try:
        host, port = address[0], address[1]
        return "%s:%s" % (host, port)
    except (TypeError, IndexError, KeyError):
        return repr(address)


def denied(address):
    """The error every outgoing connection gets."""
    return PermissionError(errno.EACCES, MESSAGE % _where(address))


def install():
    import socket
    import sys

    def create_connection(address, *args, **kwargs):
        raise denied(address)

    def getaddrinfo(host, port, *args, **kwargs):
        raise denied((host, port))

    def connect(self, address):
        raise denied(address)

    def connect_ex(self, address):
        return errno.EACCES

    socket.create_connection = create_connection
    socket.getaddrinfo = getaddrinfo
    socket.socket.connect = connect
    socket.socket.connect_ex = connect_ex
    connection = sys.modules.get("urllib3.util.connection")
    if connection is not None:
        connection.create_connection = create_connection
