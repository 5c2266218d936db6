"""The poller lock's send log on the wire: one short string per route.

The lock's item carries, per route, the jobs sent in each second of the SQS lag window (60 s by
default) and the second its queue was last read empty (a 0-job entry). As ``[[epoch, n], ...]``
lists that was about 17 bytes a second with a send, 1.8 KiB for three routes at 2 jobs/s: the item
passed 2 KiB and every lock write (three a dispatching cycle and relay) billed three write units
where one would do (bench/RESULTS.md, issue 29). Written as a string instead: the first entry's
epoch second, then each entry as the seconds since the one before, with ``xN`` when it is not one
job: ``"1796473042,0,1,2x3,5x0"`` (0 jobs: the empty mark). Lists are still read (an item written
before this change); a reader that predates it skips a string (not a list) and counts on SQS's count
alone for that route, as it does for any unreadable entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def encode(sent: Mapping[int, int], empty: int | None = None) -> str:
    """One route's entries (epoch second -> jobs sent; ``empty``: read-empty second) as a string."""
    entries = sorted([*sent.items(), *([(empty, 0)] if empty is not None else [])])
    if not entries:
        return ""
    parts, previous = [str(entries[0][0])], entries[0][0]
    for at, count in entries:
        delta, previous = at - previous, at
        parts.append(str(delta) if count == 1 else f"{delta}x{count}")
    return ",".join(parts)


def entries(value: object) -> Iterable[tuple[int, int]]:
    """(epoch second, jobs) of one route's stored entries: the string above, or the older list of
    ``[epoch, n]`` pairs (an unreadable pair is skipped). An unreadable string yields nothing."""
    if isinstance(value, list):
        for bucket in value:
            try:
                yield int(bucket[0]), int(bucket[1])
            except (TypeError, ValueError, IndexError):
                continue
        return
    if not isinstance(value, str) or not value:
        return
    try:
        parts = value.split(",")
        at, out = int(parts[0]), []
        for token in parts[1:]:
            delta, _, count = token.partition("x")
            if int(delta) < 0:
                raise ValueError(token)
            at += int(delta)
            out.append((at, int(count) if count else 1))
    except ValueError:
        return
    yield from out


# The tracked jobs' record keys (the item's "#live" lists, one per route) are written without the
# ``job#<type>#`` every key of the route starts with (workerless._core.model: records live under
# ``job#{job type}#``). A key read without it gets it back; a reader that predates this looks the
# short key up, finds no record, and keeps counting the job until its horizon: the safe side.


def short_key(job_type: str, key: str) -> str:
    prefix = f"job#{job_type}#"
    return key[len(prefix) :] if key.startswith(prefix) else key


def record_key(job_type: str, stored: str) -> str:
    return stored if stored.startswith("job#") else f"job#{job_type}#{stored}"
