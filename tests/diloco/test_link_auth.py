"""The DiLoCo link under CURVE, with real ZeroMQ sockets on loopback: the synchroniser on a
thread, honest learners with the experiment's keys, and hostile peers (no keys, an unknown
key, a learner's key claiming another learner's name). A hostile peer's handshake outcome
is awaited on its socket monitor (libzmq's zmq_socket_monitor(3) events), never by a sleep."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import zmq
from pydantic import ValidationError
from zmq.utils.monitor import recv_monitor_message

from runtime.aux.wire import encode_request
from runtime.diloco.config import DilocoConfig, SynchroniserConfig
from runtime.diloco.errors import DilocoError
from runtime.diloco.keys import (
    SYNCHRONISER,
    ClientKeys,
    KeyFileError,
    client_keys,
    server_keys,
)
from runtime.diloco.learner import DilocoLearner
from runtime.diloco.link import JOIN, LEAVE, SYNC, LearnerLink
from runtime.diloco.local import run_keys
from runtime.diloco.synchroniser import Synchroniser

WAIT_S = 60.0  # generous: a loaded two-core machine
SIZE = 8
OUTER = {"lr": 1.0, "momentum": 0.0, "nesterov": False}  # the merge is the plain mean


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Path]:
    return run_keys(tmp_path / "keys", ["a", "b"])


@contextmanager
def serving(keys: dict[str, Path]) -> Iterator[tuple[Synchroniser, str]]:
    synchroniser = Synchroniser(SynchroniserConfig(
        bind="tcp://127.0.0.1:*", learners=("a", "b"), keys=str(keys[SYNCHRONISER]),
        round_timeout_s=WAIT_S, outer=OUTER))
    address = synchroniser.bind()
    thread = threading.Thread(target=synchroniser.serve, daemon=True)
    thread.start()
    yield synchroniser, address
    thread.join(WAIT_S)
    assert not thread.is_alive()


def _link(address: str, name: str, keys: ClientKeys) -> LearnerLink:
    return LearnerLink(address, name, keys)


def _ask(link: LearnerLink, method: str, weights: torch.Tensor | None = None,
         round_: int = 0) -> torch.Tensor | None:
    merged = link.wait(link.submit(method, round_, weights), WAIT_S)
    assert merged is not None
    return merged.weights


def _finish(address: str, keys: dict[str, Path], start: torch.Tensor) -> None:
    """The honest experiment: a and b join (a's weights start it), sync once, and leave."""
    a, b = (_link(address, name, client_keys(keys[name], name)) for name in "ab")
    for link in (a, b):
        torch.testing.assert_close(_ask(link, JOIN, start), start)  # a's weights started it
    for link in (a, b):
        _ask(link, LEAVE)
        link.close()


def _handshake_failure(sock: zmq.Socket) -> int:
    """The first handshake-failure event on `sock`'s monitor, so that the peer's fate is
    known before it sends (which failure libzmq reports depends on who closes first: the
    server's ERROR command gives AUTH or PROTOCOL, a dropped connection NO_DETAIL)."""
    monitor = sock.get_monitor_socket()
    failures = {zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.EVENT_HANDSHAKE_FAILED_AUTH,
                zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL}
    try:
        while monitor.poll(int(WAIT_S * 1000)):
            event = recv_monitor_message(monitor)
            assert event["event"] != zmq.EVENT_HANDSHAKE_SUCCEEDED, "the stranger got in"
            if event["event"] in failures:
                return int(event["event"])
        raise AssertionError("no handshake outcome on the monitor")
    finally:
        sock.disable_monitor()
        monitor.close()


def _stranger(address: str, curve: tuple[bytes, bytes, bytes] | None) -> zmq.Socket:
    """A DEALER that dials the synchroniser, with a key pair and the server's key or none."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.linger = 0
    if curve is not None:
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = curve
    return sock


def _attack(sock: zmq.Socket, address: str) -> None:
    """Dial, wait for the handshake's outcome, then send a join as learner a anyway."""
    sock.connect(address)
    _handshake_failure(sock)
    frames = encode_request(1, 0, 0.0, JOIN, {"learner": "a", "round": 0,
                                              "weights": torch.full((SIZE,), 9.0)})
    with contextlib.suppress(zmq.Again):  # no connection would take it
        sock.send_multipart(frames, flags=zmq.NOBLOCK)


def test_a_bare_dealer_without_keys_gets_nothing(keys: dict[str, Path]) -> None:
    start = torch.arange(SIZE, dtype=torch.float32)
    with serving(keys) as (synchroniser, address):
        bare = _stranger(address, None)
        _attack(bare, address)
        _finish(address, keys, start)
    assert bare.poll(0) == 0  # no weights, no answer of any kind
    bare.close()
    torch.testing.assert_close(synchroniser.state.weights, start)
    assert synchroniser.seen == {"a", "b"}


def test_a_dealer_with_an_unknown_key_is_refused(keys: dict[str, Path]) -> None:
    start = torch.arange(SIZE, dtype=torch.float32)
    server = server_keys(keys[SYNCHRONISER]).public
    with serving(keys) as (synchroniser, address):
        public, secret = zmq.curve_keypair()  # right server key, but no learner's key
        stranger = _stranger(address, (public, secret, server))
        _attack(stranger, address)
        _finish(address, keys, start)
    assert stranger.poll(0) == 0
    stranger.close()
    torch.testing.assert_close(synchroniser.state.weights, start)


def test_a_learner_claiming_another_learners_name_is_refused_and_not_used(
        keys: dict[str, Path]) -> None:
    """b's key says it is a: first to join (whose weights would start the experiment),
    then inside a round in a's place. Each time it is refused without weights, and the
    merge is the mean of the honest snapshots only."""
    start, evil = torch.zeros(SIZE), torch.full((SIZE,), 1e6)
    with serving(keys) as (synchroniser, address):
        impostor = _link(address, "a", client_keys(keys["b"], "b"))
        with pytest.raises(DilocoError, match="this key belongs to learner 'b', not 'a'"):
            _ask(impostor, JOIN, evil)
        a, b = (_link(address, name, client_keys(keys[name], name)) for name in "ab")
        torch.testing.assert_close(_ask(a, JOIN, start), start)
        torch.testing.assert_close(_ask(b, JOIN, start), start)
        with pytest.raises(DilocoError, match="belongs to learner 'b'"):
            _ask(impostor, SYNC, evil)
        sent = {a: a.submit(SYNC, 0, torch.full((SIZE,), 2.0)),
                b: b.submit(SYNC, 0, torch.full((SIZE,), 4.0))}
        merged = {link: link.wait(rid, WAIT_S) for link, rid in sent.items()}
        for link in (a, b):
            _ask(link, LEAVE, round_=1)
            link.close()
        impostor.close()
    for reply in merged.values():
        assert reply is not None and reply.round == 1
        torch.testing.assert_close(reply.weights, torch.full((SIZE,), 3.0))
    assert synchroniser.impostors == 2 and synchroniser.records[0].learners == ("a", "b")


def test_an_honest_learner_trains_through_the_curve_link(keys: dict[str, Path]) -> None:
    """The learner hook with its key folder, as a rendered pod or a local run gives it."""
    with serving(keys) as (synchroniser, address):
        learners = [DilocoLearner(DilocoConfig(
            enabled=True, endpoint=address, learner=name, inner_steps=1, timeout_s=2 * WAIT_S,
            round_timeout_s=WAIT_S, keys=str(keys[name])), torch.nn.Linear(3, 2), rank=0)
            for name in "ab"]
        threads = [threading.Thread(target=_train, args=(learner,)) for learner in learners]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(2 * WAIT_S)
    assert [record.learners for record in synchroniser.records] == [("a", "b")] * 2
    assert all(record.merged for learner in learners for record in learner.records)


def _train(learner: DilocoLearner) -> None:
    learner.join()
    for step in (1, 2):
        with torch.no_grad():
            learner.params[0].add_(0.1)
        learner.after_step(step)
    learner.close()


def test_each_party_holds_only_its_own_keys_in_a_private_folder(
        keys: dict[str, Path]) -> None:
    assert keys[SYNCHRONISER].parent.stat().st_mode & 0o777 == 0o700
    files = {party: sorted(path.name for path in folder.iterdir())
             for party, folder in keys.items()}
    assert files == {SYNCHRONISER: ["learner.a.public", "learner.b.public",
                                    "synchroniser.secret"],
                     "a": ["learner.a.secret", "synchroniser.public"],
                     "b": ["learner.b.secret", "synchroniser.public"]}
    for folder in keys.values():
        assert folder.stat().st_mode & 0o777 == 0o700
        assert all(path.stat().st_mode & 0o777 == 0o400 for path in folder.iterdir())
    server = server_keys(keys[SYNCHRONISER], ("a", "b"))
    for name in "ab":
        learner = client_keys(keys[name], name)
        assert learner.server == server.public and server.learners[learner.public] == name


@pytest.mark.parametrize(("text", "words"), [
    ("", "not a CURVE key"), ("x" * 39, "not a CURVE key"), ("~" * 40, "not a CURVE key"),
    ("#" * 40, "not a CURVE key"), (None, "no such key file"),
])
def test_a_bad_key_file_is_a_clear_error_naming_it(keys: dict[str, Path], text: str | None,
                                                   words: str) -> None:
    path = keys["a"] / "learner.a.secret"
    path.chmod(0o600)
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    with pytest.raises(KeyFileError, match=words) as raised:
        client_keys(keys["a"], "a")
    assert str(path) in str(raised.value)


def test_a_synchroniser_without_an_expected_learners_key_does_not_start(
        keys: dict[str, Path]) -> None:
    with pytest.raises(KeyFileError, match=r"no public key for learner\(s\) c"):
        server_keys(keys[SYNCHRONISER], ("a", "b", "c"))


def test_no_keys_is_refused_unless_plaintext_is_asked_for_by_name() -> None:
    with pytest.raises(ValidationError, match="CURVE keys"):
        SynchroniserConfig()
    with pytest.raises(ValidationError, match="CURVE keys"):
        DilocoConfig(enabled=True, endpoint="tcp://h:1")
    with pytest.raises(ValidationError, match="exclude each other"):
        SynchroniserConfig(keys="/k", plaintext=True)
    assert SynchroniserConfig(plaintext=True).keys is None
