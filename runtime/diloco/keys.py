"""CURVE keys of a DiLoCo experiment: who holds which, and how they are read.

The link between regions is ZeroMQ CURVE (http://curvezmq.org, RFC 26): the synchroniser is
the CURVE server, each learner a client with a key pair of its own. Every party gets a folder
holding only what it needs, as plain z85 text files (40 characters, the form libzmq's
`zmq_curve_keypair` makes and the `ZMQ_CURVE_*KEY` options take):

* the synchroniser: its secret key (`synchroniser.secret`) and every learner's public key
  (`learner.<name>.public`), by which it knows the learners and binds each name to its key;
* a learner: its own secret key (`learner.<name>.secret`) and the synchroniser's public key
  (`synchroniser.public`), which it checks the server against.

A public key is derived from its secret key (`zmq_curve_public`), so no file holds a key
pair. Learner names never contain a dot (`config.LEARNER_NAME`), so no learner's file can
be mistaken for the synchroniser's. On a cluster the folders are Kubernetes Secrets that
`gkr diloco keys` creates and the rendered pods mount at `config.KEY_DIR`; a local run makes them
in a private temporary folder (`runtime.diloco.local`).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.utils import z85

from runtime.diloco.errors import DilocoError

SYNCHRONISER = "synchroniser"
SECRET, PUBLIC = "secret", "public"
Z85_KEY = 40  # characters of a 32-byte key in z85
_LEARNER_FILE = re.compile(r"^learner\.(?P<name>[a-z0-9-]+)\.public$")


class KeyFileError(DilocoError):
    """A key file is missing or holds no CURVE key."""


def learner_file(name: str, kind: str) -> str:
    return f"learner.{name}.{kind}"


def synchroniser_file(kind: str) -> str:
    return f"{SYNCHRONISER}.{kind}"


@dataclass(frozen=True)
class ServerKeys:
    """The synchroniser's: its key pair, and the learners' public keys by learner name."""

    public: bytes
    secret: bytes
    learners: Mapping[bytes, str]  # z85 public key -> learner name


@dataclass(frozen=True)
class ClientKeys:
    """A learner's: its key pair and the synchroniser's public key."""

    public: bytes
    secret: bytes
    server: bytes


def experiment_files(learners: Iterable[str]) -> dict[str, dict[str, str]]:
    """New keys for an experiment: each party's files (name -> text), by party (the
    synchroniser under `SYNCHRONISER`, each learner under its name)."""
    names = list(learners)
    server_public, server_secret = zmq.curve_keypair()
    pairs = {name: zmq.curve_keypair() for name in names}
    parties = {SYNCHRONISER: {synchroniser_file(SECRET): server_secret.decode(), **{
        learner_file(name, PUBLIC): public.decode() for name, (public, _) in pairs.items()}}}
    for name, (_, secret) in pairs.items():
        parties[name] = {learner_file(name, SECRET): secret.decode(),
                         synchroniser_file(PUBLIC): server_public.decode()}
    return parties


def server_keys(folder: Path, expected: Iterable[str] = ()) -> ServerKeys:
    """The synchroniser's keys from its folder; every expected learner must have a key."""
    secret = _read(folder / synchroniser_file(SECRET))
    learners: dict[bytes, str] = {}
    for path in sorted(folder.iterdir()):
        found = _LEARNER_FILE.match(path.name)
        if found:
            learners[_read(path)] = found["name"]
    missing = sorted(set(expected) - set(learners.values()))
    if missing:
        raise KeyFileError(f"{folder}: no public key for learner(s) {', '.join(missing)} "
                           f"(expected {learner_file(missing[0], PUBLIC)}); make the "
                           "experiment's keys again with `gkr diloco keys`")
    return ServerKeys(zmq.curve_public(secret), secret, learners)


def client_keys(folder: Path, learner: str) -> ClientKeys:
    """Learner `learner`'s keys from its folder."""
    secret = _read(folder / learner_file(learner, SECRET))
    server = _read(folder / synchroniser_file(PUBLIC))
    return ClientKeys(zmq.curve_public(secret), secret, server)


def _read(path: Path) -> bytes:
    """One z85 key; a missing, unreadable or malformed file is a KeyFileError naming it."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise KeyFileError(f"{path}: no such key file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise KeyFileError(f"{path}: unreadable: {error}") from None
    if len(text) != Z85_KEY or not _z85(text):
        raise KeyFileError(f"{path}: not a CURVE key (a {Z85_KEY}-character z85 text, as "
                           "zmq_curve_keypair makes)")
    return text.encode()


def _z85(text: str) -> bool:
    """Whether `text` decodes as z85 (pyzmq's decoder raises KeyError for a character
    outside the alphabet, struct.error for a group above 2**32)."""
    try:
        return len(z85.decode(text)) == 32
    except (KeyError, ValueError, struct.error):
        return False


def write_files(folder: Path, files: Mapping[str, str]) -> Path:
    """A party's files in `folder` (made 0700), each readable by its owner only (0400)."""
    folder.mkdir(mode=0o700, exist_ok=False)
    folder.chmod(0o700)  # whatever the umask
    for name, text in files.items():
        path = folder / name
        path.write_text(text + "\n", encoding="ascii")
        path.chmod(0o400)
    return folder
