"""Secrets kept out of crash bundles: token-shaped values everywhere, and the values of
secret-named keys.

A bundle is read by an agent and by whoever can read its bucket, so nothing in it may carry a
credential: a token a rank printed in a log, a `.env` file among the run's uncommitted
changes, a job manifest's environment. Three rules, applied to every text part the bundle
writes:

- token shapes, wherever they appear: GitHub (`ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`, and
  `github_pat_`), Google OAuth access tokens (`ya29.`) and API keys (`AIza`), AWS access key
  ids (`AKIA`/`ASIA`), PEM private-key blocks, Slack (`xoxb-` and kin), JSON Web Tokens
  (`eyJ...`.`eyJ...`.sig), Hugging Face (`hf_`);
- in env files (a `.env`, `*.env`, a gkr env file `env/*.yaml`, and such files' hunks in a
  patch): the value of every key whose name holds TOKEN, SECRET, PASSWORD, PASSWD, KEY or
  CREDENTIAL, in any case;
- elsewhere: the value of an upper-case (environment-variable) key of those names when the
  value looks like a literal (8 or more token characters), and the `value:` of a Kubernetes
  `env` entry whose `name:` is one, so that code such as `API_KEY = os.environ["API_KEY"]`
  in a patch is left intact.

A value becomes `[REDACTED]` (the key stays, so the reader sees that one was there); applying
the rules twice changes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PLACEHOLDER = b"[REDACTED]"
_WORDS = rb"(?:TOKEN|SECRET|PASSWORD|PASSWD|KEY|CREDENTIAL)"
_TOKENS = re.compile(
    rb"(?=[-gyAxeh])(?:gh[pousr]_[A-Za-z0-9]{20,}"
    rb"|github_pat_[A-Za-z0-9_]{20,}"
    rb"|ya29\.[A-Za-z0-9_.\-]{10,}"
    rb"|AIza[0-9A-Za-z_\-]{35}"
    rb"|(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"
    rb"|-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY-----|.*\Z)"
    rb"|xox[abposr]-[A-Za-z0-9\-]{10,}"
    rb"|eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}"
    rb"|hf_[A-Za-z0-9]{30,})",
    re.DOTALL)
# An env file's `KEY=value`, `KEY: value`, `export KEY=value`, `"key": "value"`: any case.
_ENV_PAIR = re.compile(
    rb"(?i)(?<![A-Za-z0-9_])(?=[A-Za-z])([A-Za-z0-9_.\-]*" + _WORDS
    + rb"[A-Za-z0-9_.\-]*[\"']?[ \t]*[=:][ \t]*[\"']?)(?!\[REDACTED\])([^\s\"'\\,;#]+)")
# Elsewhere: an environment variable's literal value.
_UPPER_PAIR = re.compile(
    rb"(?<![A-Z0-9_])(?=[A-Z])([A-Z0-9_]*" + _WORDS + rb"[A-Z0-9_]*[\"']?[ \t]*[=:][ \t]*[\"']?)"
    rb"(?!\[REDACTED\])([A-Za-z0-9_\-./+=~]{8,})(?=[\s\"',;}\]\\]|\Z)")
# A Kubernetes env entry: `name: GH_TOKEN` then `value: ...` on the next line.
_KUBE_ENV = re.compile(
    rb"(?i)(name:[ \t]*[\"']?[A-Za-z0-9_.\-]*" + _WORDS + rb"[A-Za-z0-9_.\-]*[\"']?[ \t]*\r?\n"
    rb"[ \t]*value:[ \t]*[\"']?)(?!\[REDACTED\])([^\s\"']+)")
_ENV_NAME = re.compile(r"(^|/)(\.env[^/]*|[^/]+\.env|env/[^/]+\.ya?ml|[^/]+\.env\.ya?ml)$")
_SECTION = re.compile(rb"^diff --git a/(\S+) ", re.MULTILINE)


@dataclass(frozen=True)
class Redacted:
    """Text with its secrets replaced, and how many were."""

    data: bytes
    count: int


def env_file(name: str) -> bool:
    """Whether a file name is an env file's."""
    return bool(_ENV_NAME.search(name))


def redact(data: bytes, name: str = "") -> Redacted:
    """`data` (the bundle part `name`) without its secrets. A patch is redacted file by file,
    each hunk by its own file's rules."""
    if name.endswith((".patch", ".diff")) and _SECTION.search(data):
        return _redact_patch(data)
    return _redact_text(data, env_file(name))


def _redact_patch(data: bytes) -> Redacted:
    starts = [found.start() for found in _SECTION.finditer(data)]
    pieces = [data[:starts[0]]] + [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)],
                                                            strict=True)]
    done = [_redact_text(piece, _env_section(piece)) for piece in pieces]
    return Redacted(b"".join(part.data for part in done), sum(part.count for part in done))


def _env_section(piece: bytes) -> bool:
    header = _SECTION.match(piece)
    return bool(header) and env_file(header.group(1).decode("utf-8", "replace")) \
        if header else False


def _redact_text(data: bytes, env: bool) -> Redacted:
    count = 0

    def value(found: re.Match[bytes]) -> bytes:
        nonlocal count
        count += 1
        return found.group(1) + PLACEHOLDER

    def token(found: re.Match[bytes]) -> bytes:
        nonlocal count
        count += 1
        return PLACEHOLDER

    data = _TOKENS.sub(token, data)
    data = _KUBE_ENV.sub(value, data)
    data = (_ENV_PAIR if env else _UPPER_PAIR).sub(value, data)
    return Redacted(data, count)
