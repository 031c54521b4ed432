"""Identities: a cluster authority and per-node certificates bound to node addresses.

How it works
============
In identity mode a node proves who it is with an X.509 certificate instead of a shared key.
A cluster has one *authority* (``pubmesh ca init DIR``): an Ed25519 key and a self-signed
certificate (``DIR/ca.key``, ``DIR/ca.crt``). ``pubmesh ca issue DIR HOST:PORT OUTDIR`` makes a
node's identity: a fresh Ed25519 key (``OUTDIR/node.key``) and a certificate the authority signs
(``OUTDIR/node.crt``), with a copy of the authority's certificate (``OUTDIR/ca.crt``) to check
peers against. Ed25519 because its signatures are small and fast and it has no parameters to get
wrong (iroh's endpoint keys are Ed25519 too; libp2p peer ids are commonly Ed25519 keys).

A node's id *is* its address (:mod:`pubmesh.net.address`), so the certificate names the
address: a URI subject alternative name ``pubmesh://HOST:PORT`` (and the IP address as an
``IPAddress`` name, for ordinary TLS tools). A peer is accepted only if its certificate

* chains to the cluster's authority (checked by TLS itself, against ``ca.crt``),
* is within its validity period, and
* names the address the peer claims (the one dialed, or the one its HELLO gives),

so an insider cannot take another node's id: the certificate it holds names its own address
only. The authority's key signs nothing else and never leaves ``DIR``; the files holding keys
are created with mode 0600.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pubmesh.errors import UserError
from pubmesh.net.address import node_id, parse_hostport
from pubmesh.net.security import write_private
from pubmesh.private import refuse_open_directory, write_new
from pubmesh.proto.core import NodeId

CA_CERT = "ca.crt"
CA_KEY = "ca.key"
NODE_CERT = "node.crt"
NODE_KEY = "node.key"
URI_SCHEME = "pubmesh://"
#: validity of an authority's certificate and of a node's, by default
CA_DAYS = 3650
NODE_DAYS = 365


@dataclass(frozen=True)
class Identity:
    """A node's identity as loaded from an ``OUTDIR`` of ``pubmesh ca issue``: the PEM files'
    paths (for :mod:`ssl`), the address the certificate names and the certificate itself."""

    directory: Path
    cert_file: Path
    key_file: Path
    ca_file: Path
    address: str
    node: NodeId
    certificate: x509.Certificate
    authority: x509.Certificate


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _refuse_existing(paths: list[Path], force: bool) -> None:
    """Nothing is written unless every file may be: no half-replaced authority or identity."""
    for path in paths:
        if path.exists() and not force:
            raise UserError(f"{path}: exists; pass --force to replace it")


def _write_public(path: Path, data: bytes, force: bool) -> None:
    write_new(path, data, force=force, mode=0o644)


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ed25519.Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _directory(path: Path, what: str) -> None:
    """``path`` made (0700) if missing; refused when another user owns it or others can
    write it: whoever can write there can swap the certificate or plant a key."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{path}: cannot make the directory ({error.strerror})") from None
    refuse_open_directory(path, f"it will hold {what}", f"chmod go-w {path}")


def init_authority(directory: Path, *, days: int = CA_DAYS, force: bool = False) -> Path:
    """``pubmesh ca init DIR``: a new authority in ``directory``; returns ``ca.crt``'s path."""
    if days < 1:
        raise UserError(f"--days {days}: a certificate must be valid for at least a day")
    _directory(directory, "an authority's key")
    _refuse_existing([directory / CA_KEY, directory / CA_CERT], force)
    key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"pubmesh cluster CA {secrets.token_hex(4)}")]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, None)
    )
    write_private(directory / CA_KEY, _key_pem(key), force)
    _write_public(directory / CA_CERT, _pem(cert), force)
    return directory / CA_CERT


def load_authority(directory: Path) -> tuple[x509.Certificate, ed25519.Ed25519PrivateKey]:
    cert = _read_cert(directory / CA_CERT, "the authority's certificate")
    path = directory / CA_KEY
    key = _read_key(path, "make an authority: pubmesh ca init DIR")
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise UserError(f"{path}: not an Ed25519 key")
    if key.public_key() != cert.public_key():
        raise UserError(f"{path}: not the key of {directory / CA_CERT}")
    return cert, key


def check_authority(directory: Path) -> None:
    """``directory`` holds an authority that can issue (its certificate and its key, matching
    and unexpired); else a UserError naming the file and the problem."""
    cert, _key = load_authority(directory)
    if cert.not_valid_after_utc <= _now():
        raise UserError(f"{directory / CA_CERT}: the authority's certificate has expired")


def _read_key(path: Path, missing: str) -> PrivateKeyTypes:
    """The PEM private key in ``path``; a UserError naming the file otherwise (``missing``
    says what it should hold, or how to make it)."""
    try:
        return serialization.load_pem_private_key(path.read_bytes(), None)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file ({missing})") from None
    except (OSError, ValueError, TypeError) as error:
        raise UserError(f"{path}: not a private key pubmesh can read ({error})") from None


def _read_cert(path: Path, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file ({what})") from None
    except (OSError, ValueError) as error:
        raise UserError(f"{path}: not a PEM certificate ({what}: {error})") from None


def issue(
    authority_dir: Path, address: str, out: Path, *, days: int = NODE_DAYS, force: bool = False
) -> Identity:
    """``pubmesh ca issue DIR HOST:PORT OUTDIR``: a node identity bound to ``address``."""
    if days < 1:
        raise UserError(f"--days {days}: a certificate must be valid for at least a day")
    host, port = parse_hostport(address, what="HOST:PORT")
    ca_cert, ca_key = load_authority(authority_dir)
    now = _now()
    if ca_cert.not_valid_after_utc <= now:
        raise UserError(f"{authority_dir / CA_CERT}: the authority's certificate has expired")
    not_after = min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
    key = ed25519.Ed25519PrivateKey.generate()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{host}:{port}")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.UniformResourceIdentifier(f"{URI_SCHEME}{host}:{port}"),
                    x509.IPAddress(ipaddress.IPv4Address(host)),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, None)
    )
    _directory(out, "a node's key")
    _refuse_existing([out / NODE_KEY, out / NODE_CERT, out / CA_CERT], force)
    write_private(out / NODE_KEY, _key_pem(key), force)
    _write_public(out / NODE_CERT, _pem(cert), force)
    _write_public(out / CA_CERT, _pem(ca_cert), force)
    from pubmesh.net.revocation import record_issued  # the record ca revoke reads

    record_issued(authority_dir, cert, f"{host}:{port}")
    return load_identity(out)


def certificate_address(cert: x509.Certificate) -> str | None:
    """The ``HOST:PORT`` a node certificate names (its ``pubmesh://`` URI), or None."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    uris = [u for u in names.get_values_for_type(x509.UniformResourceIdentifier)]
    found = [u.removeprefix(URI_SCHEME) for u in uris if u.startswith(URI_SCHEME)]
    return found[0] if len(found) == 1 else None


def check_certificate(
    cert: x509.Certificate, authority: x509.Certificate, claimed: str | None
) -> str | None:
    """Why ``cert`` is not an identity of this cluster for ``claimed`` (``HOST:PORT``; None:
    any address), or None when it is: signed by ``authority``, within its validity period,
    naming exactly one address, and that one ``claimed``."""
    try:
        cert.verify_directly_issued_by(authority)
    except (ValueError, TypeError, InvalidSignature):
        return "is not from this cluster's authority"
    now = _now()
    if cert.not_valid_after_utc <= now:
        return f"expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if cert.not_valid_before_utc > now:
        return f"is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    named = certificate_address(cert)
    if named is None:
        return "names no pubmesh:// address"
    if claimed is not None and named != claimed:
        return f"names {named}, not {claimed}"
    return None


def load_identity(directory: Path | str) -> Identity:
    """The identity in ``directory`` (``node.crt``, ``node.key``, ``ca.crt``), checked: the
    key is the certificate's, the authority signed it and it is valid now. Raises
    :class:`UserError` naming the file and the problem."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(
            f"identity {directory}: no such directory (make one: pubmesh ca issue CA_DIR "
            f"HOST:PORT {directory})"
        )
    cert = _read_cert(directory / NODE_CERT, "this node's certificate")
    authority = _read_cert(directory / CA_CERT, "the cluster authority's certificate")
    key_file = directory / NODE_KEY
    key = _read_key(key_file, "this node's private key")
    if key.public_key() != cert.public_key():
        raise UserError(f"{key_file}: not the key of {directory / NODE_CERT}")
    problem = check_certificate(cert, authority, None)
    if problem is not None:
        raise UserError(f"{directory / NODE_CERT}: {problem}")
    address = certificate_address(cert)
    assert address is not None  # check_certificate said it names one
    host, port = parse_hostport(address, what=f"{directory / NODE_CERT}'s address")
    return Identity(
        directory=directory,
        cert_file=directory / NODE_CERT,
        key_file=key_file,
        ca_file=directory / CA_CERT,
        address=address,
        node=node_id(host, port),
        certificate=cert,
        authority=authority,
    )


def signing_key(identity: Identity) -> ed25519.Ed25519PrivateKey:
    """The private key of ``identity``, which signs its node's publications."""
    key = _read_key(identity.key_file, "this node's private key")
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise UserError(f"{identity.key_file}: not an Ed25519 key")
    return key


def tls_contexts(identity: Identity) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) TLS contexts of a node: TLS 1.3 only, this node's certificate and key
    on both ends.

    The accepting end requires the dialer's certificate and has TLS check it against the
    cluster's authority (a failure reaches the dialer as a TLS alert naming it, e.g. unknown
    CA, certificate expired). The dialing end takes the acceptor's certificate and checks it
    itself, with :func:`check_certificate` (the authority's signature, the validity period and
    the address dialed), so that when it refuses it can tell the acceptor why over the TLS
    session (a REFUSED frame) instead of dropping the connection. Host names are never
    checked: nodes are addresses, and the ``pubmesh://`` address a certificate names is."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.check_hostname = False
    client.verify_mode = ssl.CERT_NONE  # checked by the transport: check_certificate
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_verify_locations(cafile=identity.ca_file)
    for context in (server, client):
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_cert_chain(identity.cert_file, identity.key_file)
    return server, client


def bound_listen(identity: Identity, listen: tuple[str, int], what: str) -> tuple[str, int]:
    """Where a node with ``identity`` listens: its certificate's address (``listen``'s port 0:
    wherever the certificate says); any other address is a UserError naming ``what``, since a
    node's address is its id and its peers would refuse it."""
    named = parse_hostport(identity.address, what=f"{identity.cert_file}'s address")
    if listen[1] == 0:
        return named
    if listen != named:
        raise UserError(
            f"{what} {listen[0]}:{listen[1]}: the identity in {identity.directory} names "
            f"{identity.address} (a node's address is its id); listen there or issue an "
            "identity for this address"
        )
    return listen
