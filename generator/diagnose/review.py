"""What a person reviews and approves: the agent's answer, the run's recorded changes, and
one digest that binds them.

The bundle (a local folder or a bucket) can be written after the run and after `show`: by the
agent, by another process, by anyone who can write the bucket. So nothing is taken on trust:
the run's uncommitted changes (`code/changes.patch`) must have the sha256 that the run's
manifest recorded when it wrote them, and an approval names the digest of the proposal it
approves (the report, the patch and those changes, as `show` printed them): what approve
commits and relaunches is exactly what it read and checked against that digest, or nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from generator.errors import BadRequest, CheckFailed
from runtime.crash.agent import DIAGNOSIS
from runtime.crash.code import CodeIdentity
from runtime.crash.index import Bundle
from runtime.crash.report import PATCH, REPORT, DiagnosisReport, parse_report

DECISION = "decision.json"
CHANGES = "code/changes.patch"
_DIGEST_FORMAT = b"gkr-diagnose-proposal-v1"


class ChangesNotRecorded(CheckFailed):
    """The bundle's copy of the run's uncommitted changes is not what the run recorded."""


class ProposalChanged(CheckFailed):
    """The proposal is not the one that was reviewed: it changed after it was shown."""


@dataclass(frozen=True)
class Answer:
    """The agent's answer and the decision on it, as kept beside the bundle."""

    report: DiagnosisReport
    patch: bytes
    decision: dict[str, Any] | None

    @property
    def state(self) -> str:
        return str(self.decision["decision"]) if self.decision else "proposed"


@dataclass(frozen=True)
class Proposal:
    """An answer with the run's checked changes: everything an approval applies."""

    answer: Answer
    changes: bytes

    @property
    def digest(self) -> str:
        """sha256 over the report, the patch and the changes, each length-prefixed."""
        report = json.dumps(self.answer.report.model_dump(mode="json"), sort_keys=True)
        digest = hashlib.sha256(_DIGEST_FORMAT)
        for part in (report.encode(), self.answer.patch, self.changes):
            digest.update(len(part).to_bytes(8, "big") + part)
        return f"sha256:{digest.hexdigest()}"


def load_answer(bundle: Bundle) -> Answer:
    """The answer of the bundle's run; BadRequest when there is none yet."""
    folder = bundle.folder.child(DIAGNOSIS)
    if not folder.exists(REPORT):
        raise BadRequest(f"run {bundle.run} has no diagnosis yet: run `gkr diagnose "
                         f"{bundle.run}`")
    report = parse_report(folder.read(REPORT), f"{folder.uri}/{REPORT}")
    patch = folder.read(PATCH) if folder.exists(PATCH) else b""
    decision = _decision(folder.read(DECISION), f"{folder.uri}/{DECISION}") \
        if folder.exists(DECISION) else None
    return Answer(report, patch, decision)


def _decision(data: bytes, where: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError as error:
        raise BadRequest(f"{where}: not JSON: {error}") from None
    if not isinstance(body, dict) or "decision" not in body:
        raise BadRequest(f"{where}: not a decision (an object with a `decision` key)")
    return body


def load_proposal(bundle: Bundle) -> Proposal:
    """The answer and the run's changes, the changes checked against the manifest."""
    folder = bundle.folder
    data = folder.read(CHANGES) if folder.exists(CHANGES) else None
    return Proposal(load_answer(bundle), verified_changes(bundle, data, f"{bundle.uri}/{CHANGES}"))


def verified_changes(bundle: Bundle, data: bytes | None, where: str) -> bytes:
    """`data` (the bundle's code/changes.patch; None: absent) when its sha256 is the one the
    run's manifest recorded; ChangesNotRecorded saying what differs otherwise."""
    code = CodeIdentity.from_dict(bundle.manifest.get("code") or {})
    recorded = code.changes_sha256
    if data is None:
        if recorded:
            raise ChangesNotRecorded(
                f"{where} is missing, yet run {bundle.run}'s manifest records uncommitted "
                f"changes (sha256 {recorded}, {code.changes_bytes} bytes): the code that ran "
                "cannot be rebuilt, so nothing is applied")
        return b""
    actual = hashlib.sha256(data).hexdigest()
    if not recorded:
        raise ChangesNotRecorded(
            f"{where} (sha256 {actual}) is refused: run {bundle.run}'s manifest records no "
            "uncommitted changes, so the file was added after the run")
    if actual != recorded:
        raise ChangesNotRecorded(
            f"{where} is refused: its sha256 is {actual}, not the {recorded} that run "
            f"{bundle.run}'s manifest recorded: the file changed after the run")
    return data


def check_reviewed(proposal: Proposal, reviewed: str, run: str) -> None:
    """ProposalChanged unless `reviewed` (as `show` printed it, `sha256:` optional) is the
    proposal's digest."""
    wanted = reviewed if reviewed.startswith("sha256:") else f"sha256:{reviewed}"
    if wanted != proposal.digest:
        raise ProposalChanged(
            f"the proposal for run {run} is refused: it is not the one reviewed (reviewed "
            f"{wanted}, now {proposal.digest}); it changed after it was shown, and nothing "
            f"was applied: review it again with `gkr diagnose show {run}`")
