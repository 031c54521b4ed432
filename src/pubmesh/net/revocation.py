"""The authority's revocation list, and how it reaches every node.

Certificates expire, but a member must at times be put out before its certificate expires (a
lost key, a member turned hostile): ``pubmesh ca revoke DIR HOST:PORT`` revokes every
certificate the authority in ``DIR`` has issued for that address (``ca issue`` records each in
``DIR/issued.jsonl``), and writes the list, signed with the authority's key, to
``DIR/revoked.list``. A certificate issued for the address later is not on it: a revoked node
can be given a new identity.

The list travels through the cluster itself. A node started with ``--revocations FILE``
reads the file, and reads it again whenever it changes; a node that has a list sends it on
every connection it opens (a control frame), and a node that receives a newer list than its
own, signed by the cluster's authority, takes it and sends it on to every peer it is
connected to. So loading the list into one node (a file on its host) reaches every node that
is connected to the cluster, and a node that joins later gets it from its first link. A list
is newer when it was signed later (``issued``); an older one, a copy of the same one or one
with a bad signature is ignored (a bad one is charged to its sender as invalid traffic).

What the list does at a node: a connection whose peer's certificate is on it is closed, a
handshake showing such a certificate is refused (``revoked``), and a publication signed with
one is refused (``revoked``, pubmesh.net.signing) whichever member relays it.

The format is ours, not an X.509 CRL: the Ed25519 signature (64 bytes) over a domain string
and the JSON that follows it, ``{"v": 1, "issued": T, "revoked": [{"address", "serial",
"at"}]}``, serials as decimal strings.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519

from pubmesh.errors import UserError
from pubmesh.private import append_line, replace_file

#: what the authority's signature covers, before the JSON
DOMAIN = b"pubmesh revocation list\x00"
#: the list's file in the authority's directory, and the record of issued certificates
LIST_FILE = "revoked.list"
ISSUED_LOG = "issued.jsonl"
#: bytes a list may take (a frame carries it whole): about 10,000 entries
MAX_LIST = 1 << 20


@dataclass(frozen=True)
class RevocationList:
    """A verified list: when it was signed, the serial numbers it revokes, its entries
    (address, serial, when revoked) and its bytes as signed (sent on as they are)."""

    issued: float
    serials: frozenset[int]
    entries: tuple[tuple[str, int, float], ...]
    blob: bytes

    def revokes(self, cert: x509.Certificate) -> bool:
        return cert.serial_number in self.serials


def encode(entries: list[tuple[str, int, float]], issued: float, key: Any) -> bytes:
    """The list of ``entries`` signed at ``issued`` with the authority's ``key``."""
    payload = json.dumps(
        {
            "v": 1,
            "issued": issued,
            "revoked": [{"address": a, "serial": str(s), "at": t} for a, s, t in entries],
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    return bytes(key.sign(DOMAIN + payload)) + payload


def parse(blob: bytes, authority: x509.Certificate) -> RevocationList:
    """The list in ``blob`` if the cluster's ``authority`` signed it; ValueError saying why
    not otherwise."""
    if len(blob) > MAX_LIST:
        raise ValueError(f"a list of {len(blob):,} bytes (at most {MAX_LIST:,})")
    signature, payload = blob[:64], blob[64:]
    key = authority.public_key()
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise ValueError("the authority's key is not Ed25519")
    try:
        key.verify(signature, DOMAIN + payload)
    except (InvalidSignature, ValueError):
        raise ValueError("not signed by this cluster's authority") from None
    try:
        data = json.loads(payload)
        issued = float(data["issued"])
        entries = tuple(
            (str(e["address"]), int(e["serial"]), float(e["at"])) for e in data["revoked"]
        )
        if data["v"] != 1:
            raise ValueError(f"version {data['v']}")
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"not a revocation list ({error})") from None
    return RevocationList(issued, frozenset(s for _, s, _ in entries), entries, bytes(blob))


def load(path: Path, authority: x509.Certificate) -> RevocationList:
    """The list in the file ``path``; a UserError naming the file and the problem."""
    try:
        blob = path.read_bytes()
    except OSError as error:
        raise UserError(f"{path}: cannot read the revocation list ({error.strerror})") from None
    try:
        return parse(blob, authority)
    except ValueError as error:
        raise UserError(f"{path}: {error}") from None


def record_issued(directory: Path, cert: x509.Certificate, address: str) -> None:
    """Append ``cert`` (its serial, address and validity) to the authority's record, so a
    later ``ca revoke`` can name it by address. The record is the authority's: 0600."""
    line = json.dumps(
        {
            "serial": str(cert.serial_number),
            "address": address,
            "not_after": cert.not_valid_after_utc.isoformat(),
        }
    )
    try:
        append_line(directory / ISSUED_LOG, line)
    except OSError as error:
        raise UserError(
            f"{directory / ISSUED_LOG}: cannot record the certificate ({error})"
        ) from None


def revoke(directory: Path, address: str) -> tuple[RevocationList, int]:
    """``pubmesh ca revoke DIR HOST:PORT``: every certificate issued for ``address`` that has
    not expired goes on the list, which is signed anew and written to ``DIR/revoked.list``;
    the list and how many certificates it newly revokes."""
    from pubmesh.net.identity import load_authority

    cert, key = load_authority(directory)
    now = time.time()
    serials = []
    try:
        lines = (directory / ISSUED_LOG).read_text().splitlines()
    except FileNotFoundError:
        lines = []
    except OSError as error:
        raise UserError(f"{directory / ISSUED_LOG}: cannot read it ({error.strerror})") from None
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            if record["address"] != address:
                continue
            until = datetime.datetime.fromisoformat(record["not_after"]).timestamp()
            serial = int(record["serial"])
        except (ValueError, KeyError, TypeError) as error:
            raise UserError(f"{directory / ISSUED_LOG}: line {number}: {error}") from None
        if until > now:
            serials.append(serial)
    if not serials:
        raise UserError(
            f"{address}: no unexpired certificate issued for it is on record in "
            f"{directory / ISSUED_LOG} (pubmesh ca issue records each one)"
        )
    path = directory / LIST_FILE
    entries: list[tuple[str, int, float]] = []
    issued = now
    if path.exists():
        old = load(path, cert)
        entries = list(old.entries)
        issued = max(now, old.issued + 1e-6)
    known = {serial for _, serial, _ in entries}
    new = [s for s in serials if s not in known]
    entries += [(address, s, now) for s in new]
    blob = encode(entries, issued, key)
    try:
        replace_file(path, blob, mode=0o644)
    except OSError as error:
        raise UserError(f"{path}: cannot write it ({error.strerror})") from None
    return parse(blob, cert), len(new)
