"""A throwaway CA, a broker certificate and client certificates for the TLS
tests, made with `cryptography` at test time (nothing secret is committed)."""
from __future__ import annotations

import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str, ou: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COUNTRY_NAME, "US"), x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raykafka")]
    if ou:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    parts.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(parts)


def _cert(subject, issuer, public_key, signing_key, *, ca: bool, san: list[str] = ()):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
        import ipaddress

        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address(s)) if s[0].isdigit() else x509.DNSName(s) for s in san]),
            critical=False)
    if not ca:
        builder = builder.add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(signing_key, hashes.SHA256())


def _pem_key(key, password: bytes | None = None) -> bytes:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _pem_cert(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(directory: Path, key_password: str | None = None) -> dict[str, Path]:
    """ca.pem, broker.pem (key + chain, KIP-651 keystore file; key encrypted with key_password),
    broker-key.pem / broker-chain.pem apart, client.pem + client-key.pem (CN=alice, OU=clients)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("raykafka test CA")
    ca = _cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    broker_key = ec.generate_private_key(ec.SECP256R1())
    broker = _cert(_name("broker"), ca_name, broker_key.public_key(), ca_key, ca=False,
                   san=["localhost", "127.0.0.1"])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(_name("alice", "clients"), ca_name, client_key.public_key(), ca_key, ca=False)
    password = key_password.encode() if key_password else None
    files = {
        "ca": (_pem_cert(ca)),
        "broker": _pem_key(broker_key, password) + _pem_cert(broker) + _pem_cert(ca),
        "broker-key": _pem_key(broker_key, password),
        "broker-chain": _pem_cert(broker) + _pem_cert(ca),
        "client": _pem_cert(client),
        "client-key": _pem_key(client_key),
    }
    paths = {}
    for name, data in files.items():
        path = directory / f"{name}.pem"
        path.write_bytes(data)
        paths[name] = path
    return paths
