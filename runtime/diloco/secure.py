"""The DiLoCo link's sockets with CURVE: encrypted, and the synchroniser knows who is talking.

ZeroMQ's CURVE mechanism (RFC 26, libzmq's zmq_curve(7)) encrypts every frame and
authenticates the server to the client by its public key. Which clients the server accepts
is asked of a ZAP handler (RFC 27): here pyzmq's `ThreadAuthenticator`, which admits only the
public keys of the experiment's learners, so an unknown key (or none) never completes the
handshake and no message of it reaches the synchroniser. The ZAP reply's User-Id is the
learner's name (`curve_user_id`); libzmq attaches it to every message of that connection as
the `User-Id` property (zmq_msg_gets(3)), which `ServerLink.drain` hands on with each message
so that the synchroniser can hold a request's claimed learner to the key that sent it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from runtime.aux.wire import tune, waiting
from runtime.diloco.keys import ClientKeys, ServerKeys

log = logging.getLogger(__name__)
ZAP_DOMAIN = "diloco"  # RFC 27: the domain the server's sockets ask the ZAP handler about
USER_ID = "User-Id"


def secure_client(sock: zmq.Socket, keys: ClientKeys) -> zmq.Socket:
    """A learner's socket as a CURVE client of the synchroniser `keys.server` names (set
    before connect: libzmq reads the mechanism when the connection starts)."""
    sock.curve_secretkey = keys.secret
    sock.curve_publickey = keys.public
    sock.curve_serverkey = keys.server
    return sock


class _Learners:
    """The credentials provider pyzmq's authenticator asks (`callback(domain, z85_key)`)."""

    def __init__(self, learners: Mapping[bytes, str]) -> None:
        self.learners = learners

    def callback(self, domain: str, key: bytes) -> bool:
        known = domain == ZAP_DOMAIN and key in self.learners
        if not known:
            log.warning("refused a CURVE connection with an unknown key %s", key.decode())
        return known


class _Authenticator(ThreadAuthenticator):
    """pyzmq's ZAP handler, whose User-Id for an admitted key is the learner's name (pyzmq
    documents `curve_user_id` as the hook to override; its default is the z85 key)."""

    def __init__(self, context: zmq.Context, learners: Mapping[bytes, str]) -> None:
        super().__init__(context, log=logging.getLogger(f"{__name__}.zap"))
        self.learners = learners

    def curve_user_id(self, client_public_key: bytes) -> str:
        return self.learners[zmq.utils.z85.encode(client_public_key)]


class ServerLink:
    """The synchroniser's ROUTER: with keys, a CURVE server behind its own ZAP handler on a
    context of its own (a context has one ZAP endpoint, and tests run several
    synchronisers in one process); without, plaintext on the shared context."""

    def __init__(self, keys: ServerKeys | None) -> None:
        self.keys = keys
        self.context = zmq.Context() if keys is not None else zmq.Context.instance()
        self.authenticator: _Authenticator | None = None
        if keys is not None:
            self.authenticator = _Authenticator(self.context, keys.learners)
            self.authenticator.start()
            self.authenticator.configure_curve_callback(ZAP_DOMAIN, _Learners(keys.learners))
        self.sock = tune(self.context.socket(zmq.ROUTER))
        if keys is not None:
            self.sock.curve_server = True
            self.sock.curve_secretkey = keys.secret
            self.sock.curve_publickey = keys.public
            self.sock.zap_domain = ZAP_DOMAIN.encode()

    def drain(self, ready: bool) -> Iterator[tuple[str | None, list[Any]]]:
        """Every waiting message with the learner its connection authenticated as (None
        on a plaintext link): the routing identity and head as bytes, array frames as
        zmq.Frames (as `runtime.aux.wire.recv_message` gives them)."""
        while ready or waiting(self.sock):
            ready = False
            yield self._receive()

    def _receive(self) -> tuple[str | None, list[Any]]:
        # The identity frame is read as a Frame for its User-Id (libzmq's ROUTER gives the
        # routing-id frame the connection's metadata too); the rest as recv_message reads.
        first = self.sock.recv(zmq.NOBLOCK, copy=False)
        peer = str(first.get(USER_ID)) if self.keys is not None else None
        parts: list[Any] = [first.bytes]
        frame = first
        while frame.more:
            frame = self.sock.recv(0, copy=False)
            parts.append(frame.bytes if len(parts) < 2 else frame)
        return peer, parts

    def close(self) -> None:
        self.sock.close()
        if self.authenticator is not None:
            self.authenticator.stop()
            self.context.term()
