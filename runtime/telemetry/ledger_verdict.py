"""Whether a run trained every sample of its schedule exactly once: the verdict over its sample
ledger (issue 24; the rows are the lines runtime/telemetry/ledger.py writes).

Pure: ledger rows in, a `Verdict` out, which explains itself. The rules:

1. Lineage. A row is superseded (rolled back: not in the final model) when an incarnation
   that started from fresh weights or a checkpoint started after the row was written and
   resumed from a step below the row's. Counted, not an error.
   A commit lost with its replica group is superseded too: torchft's groups vote on their
   commits each on its own (Manager.should_commit), so a group may commit a step that the
   others discard and then die before any peer took its state; the others then commit that
   step again, without it. So an incarnation's last row is superseded when every row of the
   same step in another place was written after it, with another slot count.
2. Agreement. Every kept row of a step names the same global batches (one per micro-batch),
   batch size and slot count; a rank that does not is a disagreement, an error.
3. Coverage. The global sample stream must be covered on [0, end) (end: the last global
   batch's end) with no index twice, except an epoch's dropped tail (shorter than one global
   batch, before the epoch's end). A slot of a step without a row, where other ranks of the
   step committed, is unrecorded (a torchft rank killed after its group committed: the
   gradient included it): reported, and its slot's spans count as trained. Rows of one step
   and slot in one group with the same spans are one trainer (tensor-parallel ranks).

Everything is numpy over one entry per micro-batch (sorted starts, never a set of indices),
so a run of 10^6 rows is judged in seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["ORIGINS", "Disagreement", "Entries", "IndexRange", "Unrecorded", "Verdict", "judge"]

ORIGINS = ("fresh", "checkpoint", "heal")  # how an incarnation got its weights
RESTARTS = (0, 1)  # the ORIGINS that roll back what was trained after their step
SHOWN = 10  # problems of each kind `explain` lists; as_dict carries all

Array = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class Entries:
    """The ledger as columns, one entry per micro-batch of a row (`row` numbers the rows)."""

    row: Array
    run: Array  # which of the runs judged together (DiLoCo learners are runs of their own)
    step: Array
    group: Array
    rank: Array
    pid: Array  # the writer's process: its incarnations follow one another
    slot: Array
    slots: Array
    start: Array
    count: Array
    batch_start: Array
    batch_count: Array
    epoch_size: Array
    started: Array  # ns since the epoch
    resumed_from: Array
    origin: Array  # index into ORIGINS
    at: npt.NDArray[np.float64]  # s since the epoch

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, Any]]) -> Entries:
        """From ledger lines as mappings (the file's keys)."""
        columns: dict[str, list[Any]] = {f.name: [] for f in fields(cls)}
        runs: dict[str, int] = {}
        for number, row in enumerate(rows):
            micro = len(row["starts"])
            for name in ("step", "group", "rank", "pid", "slot", "slots", "count", "batch_count",
                         "epoch_size", "started", "resumed_from", "at"):
                columns[name] += [row[name]] * micro
            columns["row"] += [number] * micro
            columns["run"] += [runs.setdefault(row["run_id"], len(runs))] * micro
            columns["origin"] += [ORIGINS.index(row["origin"])] * micro
            columns["start"] += list(row["starts"])
            columns["batch_start"] += list(row["batch_starts"])
        return cls.from_columns(columns)

    @classmethod
    def from_columns(cls, columns: Mapping[str, Sequence[Any] | npt.NDArray[Any]]) -> Entries:
        """From one sequence per field (origin as its index in ORIGINS)."""
        arrays: dict[str, Any] = {f.name: np.asarray(
            columns[f.name], dtype=np.float64 if f.name == "at" else np.int64) for f in fields(cls)}
        return cls(**arrays)

    def __len__(self) -> int:
        return len(self.row)

    def take(self, which: npt.NDArray[Any]) -> Entries:
        """The entries a mask or index array picks."""
        return Entries(**{f.name: getattr(self, f.name)[which] for f in fields(self)})

    def end(self) -> Array:
        return self.start + self.count


@dataclass(frozen=True)
class IndexRange:
    """Global sample indices [start, stop) and where they happened."""

    start: int
    stop: int
    steps: tuple[int, ...]
    groups: tuple[int, ...]
    ranks: tuple[int, ...]

    def __str__(self) -> str:
        size = self.stop - self.start
        return (f"[{self.start}, {self.stop}) ({size} sample{'s' * (size != 1)}): "
                f"{_where(self.steps, self.groups, self.ranks)}")


@dataclass(frozen=True)
class Disagreement:
    """Ranks whose rows put a step somewhere else in the stream than the step's other rows."""

    step: int
    groups: tuple[int, ...]
    ranks: tuple[int, ...]
    batch_starts: tuple[int, ...]  # what these ranks say
    expected: tuple[int, ...]  # what the step's other rows say

    def __str__(self) -> str:
        return (f"ranks disagree on step {self.step}'s place in the stream: "
                f"{_where((), self.groups, self.ranks)} put it at global batches "
                f"{list(self.batch_starts)}, the others {list(self.expected)}")


@dataclass(frozen=True)
class Unrecorded:
    """A slot of a committed step that no row recorded: counted as trained."""

    step: int
    slot: int
    ranges: tuple[tuple[int, int], ...]

    def __str__(self) -> str:
        spans = ", ".join(f"[{lo}, {hi})" for lo, hi in self.ranges)
        return f"step {self.step} slot {self.slot}: {spans}"


@dataclass(frozen=True)
class Verdict:
    """A run's ledger judged: exactly once, or what is missing and what was trained twice."""

    exactly_once: bool
    reached_step: int
    end: int  # the stream judged: [0, end)
    samples: int  # distinct indices trained
    rows: int
    missing: tuple[IndexRange, ...]
    duplicated: tuple[IndexRange, ...]
    disagreements: tuple[Disagreement, ...]
    unrecorded: tuple[Unrecorded, ...]
    superseded_rows: int
    dropped_tail: tuple[tuple[int, int], ...]
    truncated: tuple[str, ...]  # files whose partial last line was skipped

    def headline(self) -> str:
        """One line: the answer."""
        if self.exactly_once:
            return (f"exactly once: {self.samples} samples [0, {self.end}) up to step "
                    f"{self.reached_step}")
        counts = [f"{_total(self.missing)} missing", f"{_total(self.duplicated)} duplicated"]
        if self.disagreements:
            counts.append(f"{len(self.disagreements)} step(s) where ranks disagree")
        return f"NOT exactly once up to step {self.reached_step}: {', '.join(counts)}"

    def explain(self) -> str:
        """The verdict as printable lines: the answer, then each finding."""
        lines = [self.headline(),
                 f"{self.rows} ledger rows, {self.superseded_rows} superseded by a restart"]
        for title, found in (("missing", self.missing), ("duplicated", self.duplicated),
                             ("disagreeing", self.disagreements),
                             ("unrecorded (counted as trained)", self.unrecorded)):
            lines += _listed(title, found)
        if self.dropped_tail:
            tails = ", ".join(f"[{lo}, {hi})" for lo, hi in self.dropped_tail[:SHOWN])
            lines.append(f"dropped epoch tails (by design): {tails}")
        lines += [f"skipped a partial last line (rank killed mid-write): {name}"
                  for name in self.truncated]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """Plain data, for --json and gkr-ui."""
        return asdict(self) | {"headline": self.headline()}


def _listed(title: str, found: Sequence[object]) -> list[str]:
    if not found:
        return []
    more = f" (first {SHOWN} of {len(found)})" if len(found) > SHOWN else ""
    return [f"{title}{more}:", *(f"  {item}" for item in found[:SHOWN])]


def _total(ranges: Sequence[IndexRange]) -> int:
    return sum(r.stop - r.start for r in ranges)


def _where(steps: Sequence[int], groups: Sequence[int], ranks: Sequence[int]) -> str:
    parts = [f"{name} {_compact(values)}" for name, values in
             (("step", steps), ("group", [g for g in groups if g >= 0]), ("rank", ranks))
             if values]
    return ", ".join(parts) or "no rank recorded it"


def _compact(values: Sequence[int]) -> str:
    shown = ", ".join(map(str, values[:SHOWN]))
    return shown + (f" … ({len(values)})" if len(values) > SHOWN else "")


# --- the verdict ----------------------------------------------------------------------------

def judge(entries: Entries, truncated: Sequence[str] = ()) -> Verdict:
    """The verdict over a run's ledger entries (rules in the module docstring)."""
    entries = entries.take(np.argsort(entries.row, kind="stable"))  # a row's entries together
    abandoned = _abandoned(entries)
    superseded = abandoned | _superseded(entries, abandoned) | _lost_with_their_group(entries)
    kept = entries.take(~superseded)
    rows = len(np.unique(entries.row))
    superseded_rows = rows - len(np.unique(kept.row))
    if not len(kept):
        return Verdict(True, 0, 0, 0, rows, (), (), (), (), superseded_rows, (), tuple(truncated))
    agreeing, disagreements = _agreement(kept)
    batches = _batches(kept.take(agreeing))
    unrecorded = _unrecorded(kept, batches)
    lo, hi, owner = _trainers(kept, unrecorded)
    end = int((batches[:, 1] + batches[:, 2]).max())
    tails = _dropped_tails(batches)
    missing, duplicated = _coverage(lo, hi, owner, end, tails, kept, batches)
    samples = end - _total(missing) - sum(b - a for a, b in tails)
    once = not (missing or duplicated or disagreements)
    return Verdict(once, int(kept.step.max()), end, samples, rows, missing, duplicated,
                   disagreements, unrecorded, superseded_rows, tails, tuple(truncated))


def _distinct(*keys: Array) -> tuple[Array, Array]:
    """The index of one item per distinct combination of `keys` (in the keys' order, the
    first key the major one) and how many items share it: lexsort, not np.unique(axis=0),
    which sorts row by row as bytes and is many times slower."""
    order = np.lexsort(keys[::-1])
    if not len(order):
        return order, order
    same = np.ones(len(order) - 1, dtype=bool)
    for key in keys:
        sorted_key = key[order]
        same &= sorted_key[1:] == sorted_key[:-1]
    starts = np.flatnonzero(np.r_[True, ~same])
    return order[starts], np.diff(np.r_[starts, len(order)])


def _abandoned(entries: Entries) -> npt.NDArray[np.bool_]:
    """Rule 1's split brain: a replica group restarted (fresh or from a checkpoint) while
    another group was still training (its rows go on past the restart) may form a quorum of
    its own and commit steps alone, until the live groups are back and it heals from them
    (a later heal incarnation of its process). Its lineage is lost: its rows are rolled
    back, and its restart rolls back no one's."""
    out = np.zeros(len(entries), dtype=bool)
    heal = entries.origin == ORIGINS.index("heal")
    # Only a process that healed can have left a restart of its own: usually none, so a big
    # ledger is not walked incarnation by incarnation.
    restarts = np.isin(entries.origin, RESTARTS) & np.isin(entries.pid, entries.pid[heal])
    for run, pid, group, rank, started in set(zip(
            *(getattr(entries, name)[restarts].tolist()
              for name in ("run", "pid", "group", "rank", "started")), strict=True)):
        process = (entries.run == run) & (entries.pid == pid) & (entries.group == group) \
            & (entries.rank == rank)
        healed_later = np.any(process & heal & (entries.started > started))
        others = (entries.run == run) & ~process & (entries.started < started)
        alive_across = np.any(others & (entries.at > started / 1e9))
        if healed_later and alive_across:
            out |= process & (entries.started == started)
    return out


def _superseded(entries: Entries, abandoned: npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
    """Rule 1: for each step an incarnation resumed from, the latest such start; an entry
    written before it and past that step was rolled back. A checkpoint continues whichever
    run wrote it (a new run may resume another's), but a fresh start begins only its own
    run's lineage: another DiLoCo learner's rows go on. An abandoned restart (a split
    brain's, `_abandoned`) rolls back nothing."""
    restart = np.isin(entries.origin, RESTARTS) & ~abandoned
    fresh = entries.origin == ORIGINS.index("fresh")
    scope = np.where(fresh, entries.run, -1)  # -1: every run
    out = np.zeros(len(entries), dtype=bool)
    for run, resumed in set(zip(scope[restart].tolist(),
                                entries.resumed_from[restart].tolist(), strict=True)):
        starts = restart & (scope == run) & (entries.resumed_from == resumed)
        mine = entries.run == run if run >= 0 else np.ones(len(entries), dtype=bool)
        out |= mine & (entries.at < entries.started[starts].max() / 1e9) \
            & (entries.step > resumed)
    return out


def _lost_with_their_group(entries: Entries) -> npt.NDArray[np.bool_]:
    """Rule 1's torchft half: an incarnation's last row whose step the other groups all
    committed again after it, with another slot count (the quorum without the dead group)."""
    rows, signature = _signatures(entries)
    first = np.searchsorted(entries.row, rows)
    step, slots, at = entries.step[first], entries.slots[first], entries.at[first]
    lost = np.zeros(len(rows), dtype=bool)
    index, _ = _distinct(step, signature)
    steps, layouts = np.unique(step[index], return_counts=True)
    contested = steps[layouts > 1]  # usually none: this is the rare path
    if len(contested):
        incarnation = _mix(entries.started[first]) ^ _mix(
            entries.group[first] * 65_537 + entries.rank[first])
        order = np.lexsort((step, incarnation))
        final = order[np.r_[incarnation[order][1:] != incarnation[order][:-1], True]]
        for number in final[np.isin(step[final], contested)].tolist():
            redo = (step == step[number]) & (signature != signature[number])
            lost[number] = bool(np.all(at[redo] > at[number])
                                and np.all(slots[redo] != slots[number]))
    return np.repeat(lost, np.diff(np.r_[first, len(entries)]))


def _mix(x: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser (Steele, Lea, Flood 2014): a well-spread 64-bit hash."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _signatures(kept: Entries) -> tuple[Array, Array]:
    """Per row: its number and a hash of its place in the stream (every micro-batch's global
    batch, in order, with the batch size and slot count)."""
    rows, inverse = np.unique(kept.row, return_inverse=True)
    micro = np.arange(len(kept)) - np.searchsorted(kept.row, kept.row)  # rows are contiguous
    h = _mix(_mix(micro) ^ _mix(kept.batch_start) ^ _mix(kept.batch_count * 65_537 + kept.slots))
    signature = np.zeros(len(rows), dtype=np.uint64)
    np.add.at(signature, inverse, h)
    return rows, signature.view(np.int64)


def _agreement(kept: Entries) -> tuple[npt.NDArray[np.bool_], tuple[Disagreement, ...]]:
    """Rule 2: each step's most common signature is the step's; the entries that agree, and
    the rows that do not, one Disagreement per step and signature."""
    rows, signature = _signatures(kept)
    first = np.searchsorted(kept.row, rows)
    step = kept.step[first]
    index, counts = _distinct(step, signature)
    order = np.lexsort((-counts, step[index]))  # per step, the most rows first
    ranked = index[order]
    winner = ranked[np.r_[True, step[ranked][1:] != step[ranked][:-1]]]
    expected = dict(zip(step[winner].tolist(), signature[winner].tolist(), strict=True))
    row_agrees = signature == np.array([expected[s] for s in step.tolist()], dtype=np.int64)
    agrees = np.repeat(row_agrees, np.diff(np.r_[first, len(kept)]))
    return agrees, _disagreements(kept, first, step, signature, row_agrees, expected)


def _disagreements(kept: Entries, first: Array, step: Array, signature: Array,
                   row_agrees: npt.NDArray[np.bool_],
                   expected: dict[int, int]) -> tuple[Disagreement, ...]:
    found = []
    odd = zip(step[~row_agrees].tolist(), signature[~row_agrees].tolist(), strict=True)
    for s, sig in sorted(set(odd)):
        mine = first[(step == s) & (signature == sig)]
        theirs = first[(step == s) & (signature == expected[s])][0]
        found.append(Disagreement(
            s, tuple(sorted(set(kept.group[mine].tolist()))),
            tuple(sorted(set(kept.rank[mine].tolist()))),
            _batch_starts(kept, int(mine[0])), _batch_starts(kept, int(theirs))))
    return tuple(found)


def _batch_starts(kept: Entries, first: int) -> tuple[int, ...]:
    return tuple(kept.batch_start[kept.row == kept.row[first]].tolist())


def _batches(agreeing: Entries) -> Array:
    """The global batches of the kept steps: (step, start, count, slots, epoch size), one per
    micro-batch, in stream order."""
    _, first_of_step = np.unique(agreeing.step, return_index=True)  # its rows agree
    one = agreeing.take(np.isin(agreeing.row, agreeing.row[first_of_step]))
    table = np.stack([one.step, one.batch_start, one.batch_count, one.slots, one.epoch_size],
                     axis=1)
    return table[np.lexsort((table[:, 0], table[:, 1]))]


def _unrecorded(kept: Entries, batches: Array) -> tuple[Unrecorded, ...]:
    """Slots in [0, slots) of a step with no row (rule 3; a disagreeing row holds its slot)."""
    slots = {int(b[0]): int(b[3]) for b in batches}
    index, _ = _distinct(kept.step, kept.slot)
    pairs = np.stack([kept.step[index], kept.slot[index]], axis=1)
    pairs = pairs[pairs[:, 1] < np.array([slots[s] for s in pairs[:, 0].tolist()])]
    steps, seen = np.unique(pairs[:, 0], return_counts=True)
    found = []
    for step in steps[seen < np.array([slots[int(s)] for s in steps])].tolist():
        have = set(pairs[pairs[:, 0] == step, 1].tolist())
        mine = batches[batches[:, 0] == step]
        size = int(mine[0, 2]) // slots[step]
        for slot in sorted(set(range(slots[step])) - have):
            spans = tuple((int(b) + slot * size, int(b) + (slot + 1) * size) for b in mine[:, 1])
            found.append(Unrecorded(step, slot, spans))
    return tuple(found)


def _trainers(kept: Entries, unrecorded: Sequence[Unrecorded]) -> tuple[Array, Array, Array]:
    """The spans to cover the stream with: one per trainer and micro-batch (rows of one step,
    group and slot with the same span are one trainer, unless one rank wrote two of them: a
    step replayed), then the unrecorded slots' spans. `owner`: an entry of the trainer, or
    -1 for an unrecorded span."""
    index, _ = _distinct(kept.step, kept.group, kept.slot, kept.start, kept.count,
                         _replays(kept))
    extra = np.array([span for u in unrecorded for span in u.ranges], dtype=np.int64)
    extra = extra.reshape(-1, 2)
    lo = np.r_[kept.start[index], extra[:, 0]]
    hi = np.r_[kept.end()[index], extra[:, 1]]
    owner = np.r_[index, np.full(len(extra), -1)]
    return lo, hi, owner


def _replays(kept: Entries) -> Array:
    """Per entry, how many earlier rows its rank wrote for the same step (0 but in a replay
    that no restart rolled back)."""
    order = np.lexsort((kept.row, kept.rank, kept.step))
    step, rank, row = kept.step[order], kept.rank[order], kept.row[order]
    same_pair = np.r_[False, (step[1:] == step[:-1]) & (rank[1:] == rank[:-1])]
    new_row = np.r_[True, row[1:] != row[:-1]]
    counted = np.cumsum(new_row)  # rows so far, in (step, rank, row) order
    pair_start = np.maximum.accumulate(np.where(~same_pair, np.arange(len(order)), 0))
    replays = np.empty(len(order), dtype=np.int64)
    replays[order] = counted - counted[pair_start]
    return replays


def _dropped_tails(batches: Array) -> tuple[tuple[int, int], ...]:
    """Gaps between consecutive global batches that end at an epoch's end and are shorter
    than the next global batch: the schedule drops such a tail (runtime/data/schedule.py)."""
    starts, ends = batches[1:, 1], batches[:-1, 1] + batches[:-1, 2]
    tail = (starts > ends) & (starts % batches[1:, 4] == 0) & (starts - ends < batches[1:, 2])
    return tuple((int(a), int(b)) for a, b in zip(ends[tail], starts[tail], strict=True))


def _coverage(lo: Array, hi: Array, owner: Array, end: int,
              tails: Sequence[tuple[int, int]], kept: Entries,
              batches: Array) -> tuple[tuple[IndexRange, ...], tuple[IndexRange, ...]]:
    """Missing and duplicated indices of [0, end), by a sweep over the spans in start order:
    a span starting before the furthest end so far overlaps the span that reached it."""
    order = np.lexsort((hi, lo))
    lo, hi, owner = lo[order], hi[order], owner[order]
    reach = np.maximum.accumulate(hi)
    reached_by = np.maximum.accumulate(np.where(hi == reach, np.arange(len(hi)), 0))
    before = np.r_[min(0, int(lo[0])), reach[:-1]]
    dup = np.flatnonzero(lo < before)
    duplicated = [_named(int(lo[i]), int(min(hi[i], before[i])),
                         [owner[i], owner[reached_by[i - 1]]], kept) for i in dup]
    gaps = list(zip(before[lo > before].tolist(), lo[lo > before].tolist(), strict=True))
    gaps = [(max(a, 0), min(b, end)) for a, b in [*gaps, (int(reach[-1]), end)]
            if max(a, 0) < min(b, end)]  # the stream's indices only
    missing = [_attributed(a, b, kept, batches) for gap in gaps for a, b in _minus(gap, tails)]
    return _merged(missing), _merged(duplicated)


def _minus(gap: tuple[int, int], tails: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The part of a gap outside the dropped tails."""
    pieces = [gap]
    for t_lo, t_hi in tails:
        pieces = [p for a, b in pieces for p in ((a, min(b, t_lo)), (max(a, t_hi), b))
                  if p[0] < p[1]]
    return pieces


def _named(lo: int, hi: int, owners: Iterable[int], kept: Entries) -> IndexRange:
    """A duplicated range, named by the trainers of the spans that overlap (with every rank
    of each trainer: tensor-parallel ranks share a span)."""
    picked = np.zeros(len(kept), dtype=bool)
    for i in owners:
        if i >= 0:
            picked |= ((kept.step == kept.step[i]) & (kept.group == kept.group[i])
                       & (kept.slot == kept.slot[i]) & (kept.start == kept.start[i]))
    return _range(lo, hi, kept.take(picked))


def _attributed(lo: int, hi: int, kept: Entries, batches: Array) -> IndexRange:
    """A missing range, named by the steps whose global batches hold it and the rows whose
    slot's span in those steps overlaps it (their spans went elsewhere)."""
    inside = batches[(batches[:, 1] < hi) & (batches[:, 1] + batches[:, 2] > lo)]
    steps = np.unique(inside[:, 0])
    size = kept.batch_count // np.maximum(kept.slots, 1)
    own_lo = kept.batch_start + kept.slot * size
    owners = np.isin(kept.step, steps) & (own_lo < hi) & (own_lo + size > lo)
    found = _range(lo, hi, kept.take(owners))
    return IndexRange(lo, hi, tuple(steps.tolist()), found.groups, found.ranks)


def _range(lo: int, hi: int, rows: Entries) -> IndexRange:
    return IndexRange(lo, hi, tuple(np.unique(rows.step).tolist()),
                      tuple(np.unique(rows.group).tolist()), tuple(np.unique(rows.rank).tolist()))


def _merged(ranges: Sequence[IndexRange]) -> tuple[IndexRange, ...]:
    """Touching or overlapping ranges as one, with the union of where they happened."""
    out: list[IndexRange] = []
    for r in sorted(ranges, key=lambda r: (r.start, r.stop)):
        if out and r.start <= out[-1].stop:
            last = out.pop()
            r = IndexRange(last.start, max(last.stop, r.stop),
                           *(tuple(sorted(set(a) | set(b))) for a, b in (
                               (last.steps, r.steps), (last.groups, r.groups),
                               (last.ranks, r.ranks))))
        out.append(r)
    return tuple(out)
