"""What a node remembers across restarts: its data directory.

``pubmesh node --data-dir DIR`` (``pubmesh.Node(data_dir=...)``) keeps in ``DIR/node.db``:

* the node's **address** (a node started again on the directory with ``--listen HOST:0``
  takes the port it had, so it comes back as the same node id);
* the **contacts** it joined through (started again without ``--contact``, it rejoins
  through them);
* its **subscriptions**, with their filters (started again, it subscribes to them again
  before any command);
* the **publications it delivered** in the last ``DELIVERED_SECONDS``, by id: a copy of one
  of them that reaches the node in its next life is not delivered again (the stack's own
  duplicate filter starts empty at every start);
* the **topic history it retains** for late subscribers (``StackNode.retentions``: chord's
  and brokertree's publishers, the clique and d2g contact), each publication with its topic,
  time, attributes and the stack's mark, by the retention's bounds (count and age: the
  rows past them go at the next prune; bytes when taken back): started again, the node
  answers history queries with what it had published before its restart.

The database is SQLite through the standard library (``sqlite3``), in write-ahead-log mode
with ``synchronous = NORMAL``: a transaction is on disk once the log is, and a crash at any
moment leaves the last committed state. Writes are batched (group commit): the runtime
commits once per turn of its event loop, for every write of that turn, and hands a delivery
to the application only after its record is committed (docs/data-dir.md).

Bad disks and bad files:

* a directory another user owns or others can write is refused (a planted database is a way
  in: a subscription list, contacts or delivered ids a stranger chose);
* a file that is not SQLite, or is a SQLite database of something else (its
  ``application_id`` is not pubmesh's), or of a newer layout, or damaged, refuses the start
  with one line naming it and what to do;
* a write that fails (a full disk, an I/O error) does not stop the node: it keeps serving from
  memory, says so once as a ``net.store`` event, counts the failure, and tries again at the
  next commit (at most ``PENDING_KEPT`` writes wait; past that, the oldest delivery records
  are given up and counted).

``pubmesh data inspect DIR`` prints what a directory holds (:func:`describe`).
"""

from __future__ import annotations

import itertools
import json
import operator
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pubmesh.durable import DELIVERED_SECONDS
from pubmesh.errors import UserError
from pubmesh.private import private_dir, private_file, refuse_open_directory
from pubmesh.proto.history import Retained, Retention

#: the database file in a data directory
DB_FILE = "node.db"
#: SQLite's application_id of a pubmesh data directory ("pmsh"), and the layout's version
APPLICATION_ID = 0x706D7368
SCHEMA_VERSION = 2
#: at most this many delivered ids are kept (the oldest go first)
DELIVERED_KEPT = 1 << 20
#: seconds between forgetting delivered ids past DELIVERED_SECONDS (a commit's extra work)
PRUNE_INTERVAL = 10.0
#: writes kept waiting while the disk refuses them; past this, the oldest delivery records go
#: (counted in ``Store.dropped``): a node on a full disk for hours holds bounded memory
PENDING_KEPT = 1 << 16

RETAINED_SCHEMA = """
CREATE TABLE retained (
    topic TEXT NOT NULL, pub_id INTEGER NOT NULL, t REAL NOT NULL, payload BLOB NOT NULL,
    attributes TEXT, mark TEXT, PRIMARY KEY (topic, pub_id)
);
CREATE INDEX retained_t ON retained (topic, t);
"""
SCHEMA = (
    """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE contacts (node INTEGER PRIMARY KEY);
CREATE TABLE subscriptions (topic TEXT PRIMARY KEY, filter TEXT);
CREATE TABLE delivered (pub_id INTEGER PRIMARY KEY, t REAL NOT NULL);
CREATE INDEX delivered_t ON delivered (t);
"""
    + RETAINED_SCHEMA
)
TABLES = {"meta", "contacts", "subscriptions", "delivered", "retained"}
DELIVERED_SQL = "INSERT OR REPLACE INTO delivered VALUES (?, ?)"
RETAINED_SQL = "INSERT OR REPLACE INTO retained VALUES (?, ?, ?, ?, ?, ?)"
#: writes a full disk may give up, oldest first, once PENDING_KEPT wait (the others, a
#: subscription or an address, are few and kept)
DROPPABLE = {DELIVERED_SQL, RETAINED_SQL}


@dataclass
class Remembered:
    """What a data directory held when the node started."""

    address: str | None = None
    contacts: tuple[int, ...] = ()
    subscriptions: dict[str, Mapping[str, Any] | None] = field(default_factory=dict)
    delivered: set[int] = field(default_factory=set)
    #: the stack's durable state (StackNode.durable) at the last commit
    state: dict[str, Any] = field(default_factory=dict)
    #: when the node last delivered a publication (wall clock; None: never)
    last_delivery: float | None = None
    #: the topic history it retained, oldest first: (topic, publication at its wall time)
    retained: list[tuple[str, Retained]] = field(default_factory=list)


class Store:
    """A node's data directory, open (module docstring). Every write is queued and made at the
    next :meth:`commit`; a failed commit keeps the queue and is counted."""

    def __init__(self, directory: Path, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.path = directory / DB_FILE
        self.clock = clock
        self._db = _open(directory)
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        #: commits that failed (a full disk ...), and the last error
        self.failures = 0
        self.problem: str | None = None
        #: delivery records given up while the disk refused writes (PENDING_KEPT)
        self.dropped = 0
        #: when a commit next forgets delivered ids past their time
        self._next_prune = 0.0
        self.commits = 0
        #: topic -> (count, seconds): the bounds of the retentions whose rows it writes
        self._bounds: dict[str, tuple[int, float]] = {}

    # ------------------------------------------------------------------ reading
    def remembered(self) -> Remembered:
        db = self._db
        meta = dict(db.execute("SELECT key, value FROM meta"))
        since = self.clock() - DELIVERED_SECONDS
        state: dict[str, Any] = {}
        if "stack_state" in meta:
            try:
                state = json.loads(meta["stack_state"])
            except ValueError:
                state = None  # type: ignore[assignment]
            if not isinstance(state, dict):
                raise UserError(
                    f"{self.path}: its stack state is not a JSON object (damaged or planted); "
                    "move the file away to start with an empty memory, or use another "
                    "--data-dir"
                )
        (last_delivery,) = db.execute("SELECT max(t) FROM delivered").fetchone()
        retained = [
            (topic, Retained(_unsigned64(pub_id), payload, t, _json(attributes), _json(mark)))
            for topic, pub_id, t, payload, attributes, mark in db.execute(
                "SELECT topic, pub_id, t, payload, attributes, mark FROM retained ORDER BY t"
            )
        ]
        return Remembered(
            retained=retained,
            state=state,
            last_delivery=last_delivery,
            address=meta.get("address"),
            contacts=tuple(n for (n,) in db.execute("SELECT node FROM contacts ORDER BY node")),
            subscriptions={
                topic: json.loads(text) if text is not None else None
                for topic, text in db.execute("SELECT topic, filter FROM subscriptions")
            },
            delivered={
                pub_id
                for (pub_id,) in db.execute("SELECT pub_id FROM delivered WHERE t >= ?", (since,))
            },
        )

    # ------------------------------------------------------------------ writing (queued)
    def set_address(self, address: str) -> None:
        self._queue("INSERT OR REPLACE INTO meta VALUES ('address', ?)", (address,))

    def set_state(self, text: str) -> None:
        """The stack's durable state (StackNode.durable), as JSON text."""
        self._queue("INSERT OR REPLACE INTO meta VALUES ('stack_state', ?)", (text,))

    def set_contacts(self, contacts: Iterable[int]) -> None:
        self._queue("DELETE FROM contacts", ())
        for node in contacts:
            self._queue("INSERT OR IGNORE INTO contacts VALUES (?)", (node,))

    def subscribed(self, topic: str, filter: Mapping[str, Any] | None) -> None:
        text = json.dumps(dict(filter), sort_keys=True) if filter is not None else None
        self._queue("INSERT OR REPLACE INTO subscriptions VALUES (?, ?)", (topic, text))

    def unsubscribed(self, topic: str) -> None:
        self._queue("DELETE FROM subscriptions WHERE topic = ?", (topic,))

    def delivered(self, pub_id: int, t: float) -> None:
        self._queue(DELIVERED_SQL, (_signed64(pub_id), t))
        self._bound_pending()

    def retained(self, retention: Retention, item: Retained, t: float) -> None:
        """A publication ``retention`` keeps, first had at wall time ``t``; the store keeps
        it by the retention's bounds (its newest ``count``, none older than ``seconds``)."""
        attributes = json.dumps(dict(item.attributes), sort_keys=True) if item.attributes else None
        mark = json.dumps(item.mark) if item.mark is not None else None
        row = (retention.topic, _signed64(item.pub_id), t, item.payload, attributes, mark)
        self._queue(RETAINED_SQL, row)
        self._bounds[retention.topic] = (retention.count, retention.seconds)
        self._bound_pending()

    def _bound_pending(self) -> None:
        if len(self._pending) > PENDING_KEPT:
            kept = [w for w in self._pending if w[0] not in DROPPABLE]
            records = [w for w in self._pending if w[0] in DROPPABLE]
            cut = len(self._pending) - PENDING_KEPT
            self.dropped += cut
            self._pending = kept + records[cut:]

    def _queue(self, sql: str, args: tuple[Any, ...]) -> None:
        self._pending.append((sql, args))

    @property
    def pending(self) -> int:
        return len(self._pending)

    def commit(self) -> bool:
        """Write what is queued in one transaction (and forget delivered ids past their time);
        False, counted and kept for the next try, if the disk refused it."""
        if not self._pending:
            return True
        pending, self._pending = self._pending, []
        now = self.clock()
        try:
            with self._db:
                # runs of one statement go as one executemany (a turn's deliveries are one)
                for sql, run in itertools.groupby(pending, key=operator.itemgetter(0)):
                    self._db.executemany(sql, [args for _sql, args in run])
                if now >= self._next_prune:
                    self._db.execute(
                        "DELETE FROM delivered WHERE t < ?", (now - DELIVERED_SECONDS,)
                    )
                    self._prune_retained(now)
        except sqlite3.Error as error:
            self._pending = pending + self._pending
            self.failures += 1
            self.problem = str(error)
            return False
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_INTERVAL
        self.commits += 1
        self.problem = None
        return True

    def _prune_retained(self, now: float) -> None:
        """Forget retained publications past their retention's bounds (count, age)."""
        for topic, (count, seconds) in sorted(self._bounds.items()):
            if seconds > 0:
                self._db.execute(
                    "DELETE FROM retained WHERE topic = ? AND t < ?", (topic, now - seconds)
                )
            self._db.execute(
                "DELETE FROM retained WHERE topic = ? AND pub_id NOT IN (SELECT pub_id FROM "
                "retained WHERE topic = ? ORDER BY t DESC LIMIT ?)",
                (topic, topic, max(count, 0)),
            )

    def close(self) -> None:
        self.commit()
        self._db.close()


def _signed64(value: int) -> int:
    """A 64-bit id as SQLite's signed integer (ids use all 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _unsigned64(value: Any) -> Any:
    """The id :func:`_signed64` stored (anything else as it is: the stack refuses it)."""
    return value & ((1 << 64) - 1) if isinstance(value, int) else value


def _json(text: Any) -> Any:
    """A JSON column's value, None for NULL; a text that is not JSON is kept as text (the
    stack refuses it, naming the row)."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def data_directory(directory: Path, what: str = "a node's data directory") -> Path:
    """``directory`` made ``0700`` if missing; a UserError if it is there and others can
    write it (a file planted there would be taken as a node's memory)."""
    if not directory.exists():
        private_dir(directory)
    refuse_open_directory(
        directory,
        what,
        "a file planted there would be taken as a node's memory; use a directory of your "
        "own that only you can write (chmod 700)",
    )
    return directory


def _open(directory: Path) -> sqlite3.Connection:
    """The directory's database, made if missing; UserError naming the file otherwise."""
    data_directory(directory)
    path = directory / DB_FILE
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise UserError(f"{path}: not a regular file; remove it or use another --data-dir")
    fresh = not path.exists()
    remedy = "move it away to start with an empty memory, or use another --data-dir"
    try:
        db = sqlite3.connect(path, check_same_thread=False)
        if fresh:
            private_file(path)
        (application,) = db.execute("PRAGMA application_id").fetchone()
        (version,) = db.execute("PRAGMA user_version").fetchone()
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
        if not tables and application == 0:
            with db:
                db.executescript(SCHEMA)
                db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif application != APPLICATION_ID:
            db.close()
            raise UserError(f"{path}: a SQLite database of something else, not pubmesh's; {remedy}")
        elif version > SCHEMA_VERSION:
            db.close()
            raise UserError(
                f"{path}: written by a newer pubmesh (layout {version}, this one reads "
                f"{SCHEMA_VERSION}); upgrade pubmesh or {remedy}"
            )
        elif version == 1 and tables >= TABLES - {"retained"}:
            with db:  # layout 1 (before the topic history was kept): add its table
                db.executescript(RETAINED_SCHEMA)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif not tables >= TABLES:
            db.close()
            raise UserError(f"{path}: pubmesh's but missing tables; {remedy}")
        (check,) = db.execute("PRAGMA quick_check").fetchone()
        if check != "ok":
            db.close()
            raise UserError(f"{path}: damaged ({check}); {remedy}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as error:
        raise UserError(f"{path}: not a pubmesh data file ({error}); {remedy}") from None
    return db


def open_store(directory: Path | str) -> Store:
    """:class:`Store` on ``directory``; UserError for a directory or file it must refuse."""
    return Store(Path(directory))


def describe(directory: Path) -> str:
    """``pubmesh data inspect DIR``: what the directory holds, as a few lines of text."""
    from pubmesh.net.address import format_id

    path = directory / DB_FILE
    if not path.exists():
        raise UserError(f"{directory}: no {DB_FILE} here (not a node's data directory)")
    store = Store(directory)
    try:
        memory = store.remembered()
        (total,) = store._db.execute("SELECT count(*) FROM delivered").fetchone()
    finally:
        store._db.close()
    lines = [
        f"data directory {directory} ({path.stat().st_size:,} bytes in {DB_FILE})",
        f"address        {memory.address or '(none yet)'}",
        "contacts       " + (", ".join(format_id(n) for n in memory.contacts) or "(none)"),
        f"subscriptions  {len(memory.subscriptions)}",
    ]
    for topic, filter_ in sorted(memory.subscriptions.items()):
        lines.append(f"  {topic}" + (f"  filter {json.dumps(filter_)}" if filter_ else ""))
    lines.append(
        f"delivered ids  {total:,} ({len(memory.delivered):,} within the last "
        f"{DELIVERED_SECONDS:.0f} s: not delivered again)"
    )
    topics: dict[str, int] = {}
    for topic, _item in memory.retained:
        topics[topic] = topics.get(topic, 0) + 1
    lines.append(
        f"retained       {len(memory.retained):,} publications for late subscribers"
        + "".join(f"\n  {topic}  {n:,}" for topic, n in sorted(topics.items()))
    )
    return "\n".join(lines)
