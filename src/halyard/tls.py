"""Certificates of a Halyard cluster: a cluster CA, the control plane's server certificate,
node certificates for agents and client certificates for people (docs/security.md).

Made with the ``cryptography`` library (``halyard certs init|issue``). Who a certificate
speaks for is in its subject alternative names: a URI ``halyard://node/NAME``,
``halyard://operator/NAME`` or ``halyard://tenant/TENANT/user/NAME``; node
certificates also carry the node's name as a DNS name. :func:`identity_from_pem`
reads it back on the control plane from the certificate gRPC has verified.

Files in a certificate directory (keys are written mode 0600)::

    ca.crt, ca.key                     the cluster CA (keep ca.key offline)
    controlplane.crt, controlplane.key the control plane (its SANs: the names agents dial)
    node-NAME.crt, node-NAME.key       one per node agent
    operator-NAME.crt/.key             operators
    user-TENANT-NAME.crt/.key          a tenant's user
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from halyard.datamodel import HalyardError, ValidationError
from halyard.datamodel.limits import MAX_JOB_ID, MAX_TENANT, MAX_USER, check_name

CA_DAYS = 3650
LEAF_DAYS = 825  # the longest browsers accept; rotation is `halyard certs issue` again
URI_SCHEME = "halyard://"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")

ROLE_AGENT = "agent"
ROLE_OPERATOR = "operator"
ROLE_TENANT_USER = "tenant-user"
ROLES = (ROLE_TENANT_USER, ROLE_OPERATOR, ROLE_AGENT)


class CertificateError(HalyardError):
    """A certificate file is missing or does not say who it is for; the message names the file."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: an agent of ``node``, an operator, or a user of ``tenant``."""

    role: str
    name: str
    tenant: str = ""
    node: str = ""
    via: str = ""  # "certificate", "token", "insecure"

    @property
    def is_operator(self) -> bool:
        return self.role == ROLE_OPERATOR

    def describe(self) -> str:
        if self.role == ROLE_AGENT:
            return f"agent of node {self.node!r}"
        if self.role == ROLE_TENANT_USER:
            return f"user {self.name!r} of tenant {self.tenant!r}"
        return f"operator {self.name!r}"


# --- making certificates ------------------------------------------------------------------

def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, 0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _names(hosts: list[str] | tuple[str, ...]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for host in hosts:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            out.append(x509.DNSName(host))
    return out


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def init_ca(folder: Path, *, cluster: str = "halyard", server_names: tuple[str, ...] = ()) -> list[Path]:
    """A new cluster CA and the control plane's certificate in ``folder`` (refuses to overwrite a CA)."""
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / "ca.key").exists() or (folder / "ca.crt").exists():
        raise CertificateError(f"{folder}: already holds a CA (ca.crt/ca.key); use another --dir or remove it")
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Halyard"),
                      x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster} cluster CA")])
    now = _now()
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write_key(folder / "ca.key", key)
    _write_cert(folder / "ca.crt", cert)
    return [folder / "ca.crt", folder / "ca.key", *issue(folder, "server", "controlplane", hosts=server_names)]


def issue(folder: Path, kind: str, name: str, *, tenant: str = "", hosts: tuple[str, ...] = ()) -> list[Path]:
    """A certificate signed by ``folder``'s CA: ``kind`` is node, operator, user or server."""
    ca_cert, ca_key = load_ca(folder)
    if kind == "node":
        check_name(name, "node", MAX_JOB_ID)
        uris, dns, stem = [f"{URI_SCHEME}node/{name}"], _names((name,)), f"node-{name}"
        usage = ExtendedKeyUsageOID.CLIENT_AUTH
    elif kind == "operator":
        check_name(name, "name", MAX_USER)
        uris, dns, stem = [f"{URI_SCHEME}operator/{name}"], [], f"operator-{name}"
        usage = ExtendedKeyUsageOID.CLIENT_AUTH
    elif kind == "user":
        check_name(tenant, "--tenant", MAX_TENANT)
        check_name(name, "name", MAX_USER)
        uris, dns = [f"{URI_SCHEME}tenant/{tenant}/user/{name}"], []
        stem, usage = f"user-{tenant}-{name}", ExtendedKeyUsageOID.CLIENT_AUTH
    elif kind == "server":
        check_name(name, "name", MAX_USER)
        uris, dns = [f"{URI_SCHEME}controlplane"], _names(tuple(dict.fromkeys((*LOOPBACK_NAMES, *hosts))))
        stem, usage = name, ExtendedKeyUsageOID.SERVER_AUTH
    else:
        raise ValidationError(f"unknown kind {kind!r} (node, operator, user, server)", field="kind")
    key = _key()
    now = _now()
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Halyard"),
                         x509.NameAttribute(NameOID.COMMON_NAME, name[:64])])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(LEAF_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName([*dns, *(x509.UniformResourceIdentifier(u) for u in uris)]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_key(folder / f"{stem}.key", key)
    _write_cert(folder / f"{stem}.crt", cert)
    return [folder / f"{stem}.crt", folder / f"{stem}.key"]


# CA keys that sign with SHA-256: `halyard certs init` makes ECDSA P-256; an operator's own RSA CA works too.
CAKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


def load_ca(folder: Path) -> tuple[x509.Certificate, CAKey]:
    try:
        cert = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
        key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), password=None)
    except FileNotFoundError as exc:
        raise CertificateError(f"{exc.filename}: no CA here; make one with `halyard certs init --dir {folder}`") \
            from None
    except ValueError as exc:
        raise CertificateError(f"{folder}: the CA cannot be read: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertificateError(f"{folder / 'ca.key'}: the CA key is of type {type(key).__name__}; Halyard signs "
                               "with ECDSA (as `halyard certs init` makes) or RSA keys")
    return cert, key


# --- reading who a certificate is for ------------------------------------------------------

@lru_cache(maxsize=1024)
def identity_from_pem(pem: bytes) -> Principal | None:
    """The principal a (verified) client certificate names, or None if it names none."""
    try:
        cert = x509.load_pem_x509_certificate(pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return None
    for uri in san.get_values_for_type(x509.UniformResourceIdentifier):
        if not uri.startswith(URI_SCHEME):
            continue
        parts = uri[len(URI_SCHEME):].split("/")
        if len(parts) == 2 and parts[0] == "node" and parts[1]:
            return Principal(ROLE_AGENT, parts[1], node=parts[1], via="certificate")
        if len(parts) == 2 and parts[0] == "operator" and parts[1]:
            return Principal(ROLE_OPERATOR, parts[1], via="certificate")
        if len(parts) == 4 and parts[0] == "tenant" and parts[2] == "user" and parts[1] and parts[3]:
            return Principal(ROLE_TENANT_USER, parts[3], tenant=parts[1], via="certificate")
    return None


# --- loading credentials ------------------------------------------------------------------

def _read(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CertificateError(f"{path}: cannot read the {what}: {exc.strerror}") from None


@dataclass(frozen=True)
class ServerTLS:
    """The control plane's certificate and key, and the CA its agents' and clients' certificates chain to."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def from_dir(cls, folder: Path) -> ServerTLS:
        return cls(_read(folder / "ca.crt", "cluster CA"), _read(folder / "controlplane.crt", "server certificate"),
                   _read(folder / "controlplane.key", "server key"))


@dataclass(frozen=True)
class ClientTLS:
    """What a client or agent dials with: the CA to check the control plane, and optionally its own certificate."""

    ca: bytes
    cert: bytes | None = None
    key: bytes | None = None
    ca_file: str = ""  # where ``ca`` was read from, for messages ("" when given as bytes)

    @classmethod
    def from_files(cls, ca: Path, cert: Path | None = None, key: Path | None = None) -> ClientTLS:
        if (cert is None) != (key is None):
            raise ValidationError("give both a certificate and its key", field="--cert/--key")
        return cls(_read(ca, "cluster CA"), _read(cert, "certificate") if cert else None,
                   _read(key, "key") if key else None, str(ca))

    @classmethod
    def for_node(cls, folder: Path, node: str) -> ClientTLS:
        return cls.from_files(folder / "ca.crt", folder / f"node-{node}.crt", folder / f"node-{node}.key")

    def credentials(self):
        import grpc

        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.cert)


# What a failed connection's transport error says when client and server disagree on TLS; the
# client or agent phrases it with its own flags. A plaintext client at a TLS port sees only "Socket closed",
# a TLS client at a plaintext port a "WRONG_VERSION_NUMBER" handshake error, a client holding another
# cluster's CA a failed verification, one dialling a name the certificate lacks a peer-name error.
NEEDS_TLS, NOT_TLS, UNKNOWN_CA, WRONG_NAME = "needs-tls", "not-tls", "unknown-ca", "wrong-name"


def tls_mismatch(details: str, *, plaintext: bool) -> str | None:
    """Which TLS disagreement a failed call's ``details`` show (one of the names above), or None."""
    if plaintext:
        return NEEDS_TLS if "Socket closed" in details else None
    if "WRONG_VERSION_NUMBER" in details:
        return NOT_TLS
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return UNKNOWN_CA
    if "Peer name" in details and "not in peer certificate" in details:
        return WRONG_NAME
    return None


def is_loopback(address: str) -> bool:
    """``HOST:PORT`` (or ``[V6]:PORT``) whose host is a loopback address or ``localhost``."""
    host = address.rsplit(":", 1)[0] if ":" in address else address
    return is_loopback_host(host.strip("[]"))


def is_loopback_host(host: str) -> bool:
    """A bare host name or address (no port) that is a loopback address or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
