"""How the broker's ZooKeeper sessions authenticate and protect what they write.

Kafka's settings, with kazoo underneath:

- ``zookeeper.set.acl=true``: every znode the broker creates gets Kafka's
  ACLs (kafka.zk.ZkData.defaultAcls): all rights for the creator's
  authenticated identity (``auth`` scheme, CREATOR_ALL_ACL), plus read for
  everyone except on the sensitive paths (``/config/users``, which holds
  SCRAM credentials, and ``/config/brokers``), which only the creator can
  read. Kafka refuses to start with set.acl and no credentials; so do we.
- credentials: ZooKeeper's ``digest`` scheme (``user:password``, sent with
  ``addauth`` on every session; no server-side setup needed), read from the
  file named by ``raykafka.zookeeper.digest.file``. The embedded ZooKeeper
  generates one at its first start. (Kafka's SASL login to ZooKeeper, DIGEST-MD5
  or Kerberos through a JAAS ``Client`` section, is not supported: use digest,
  or TLS client certificates with ZooKeeper's x509 provider.)
- ``zookeeper.ssl.*``: TLS to ZooKeeper's secure client port, with PEM files
  (kazoo takes PEM only: a keystore or truststore of another type is refused).

Every process of a broker opens its own sessions (the controller, each edge,
replica ISR writers, coordinators), many of them in Ray workers that only
get a connect string. As Kafka reads its ZooKeeper login from a process-wide
JAAS file, the settings reach every process through one environment variable
naming a JSON file (mode 0600, the broker's data dir) that ``raykafka
start`` writes: the workers inherit the variable from the raylets on a
cluster the broker starts, and from the job's runtime environment on one it
joins (there, every node must have the file at the same path: the same
--data-dir, as deploy/ray-cluster.yaml does).
"""
from __future__ import annotations

import dataclasses
import json
import os
import secrets
from pathlib import Path
from typing import Any

from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE  # lists of one ACL each

ENV_VAR = "RAYKAFKA_ZOOKEEPER_CLIENT_CONFIG"
CLIENT_CONFIG_FILE_NAME = "zookeeper-client.json"
DIGEST_FILE_NAME = "zookeeper-digest"
DIGEST_USER = "raykafka"

# kafka.zk.ZkData.SensitiveRootPaths (ZK mode): creator-only, not even readable by others.
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token")


class ZkSecurityError(ValueError):
    """The ZooKeeper client settings cannot work as given."""


@dataclasses.dataclass(frozen=True)
class ZkClientSecurity:
    set_acl: bool = False
    digest: str | None = None  # "user:password" for ZooKeeper's digest scheme
    use_ssl: bool = False
    ca: str | None = None  # PEM trusted certificates (None: the system's)
    certfile: str | None = None  # PEM certificate chain (client authentication)
    keyfile: str | None = None  # PEM private key (default: in certfile)
    keyfile_password: str | None = None
    check_hostname: bool = True

    def __post_init__(self) -> None:
        if self.digest is not None and ":" not in self.digest:
            raise ZkSecurityError("ZooKeeper digest credentials must read user:password")
        if self.set_acl and self.digest is None and not (self.use_ssl and self.certfile):
            # Kafka: "zookeeper.set.acl is true, but ZooKeeper client TLS configuration identifying the
            # broker is not configured, and the verification of the JAAS login file failed".
            raise ZkSecurityError("zookeeper.set.acl=true needs credentials the ACLs can name: "
                                  "raykafka.zookeeper.digest.file, or a TLS client certificate "
                                  "(zookeeper.ssl.keystore.location)")

    @property
    def authenticated(self) -> bool:
        return self.digest is not None or (self.use_ssl and self.certfile is not None)

    def kazoo_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for KazooClient: credentials, TLS and the default ACL."""
        kwargs: dict[str, Any] = {}
        if self.digest is not None:
            kwargs["auth_data"] = [("digest", self.digest)]
        if self.set_acl:
            kwargs["default_acl"] = default_acl("/")
        if self.use_ssl:
            kwargs.update(use_ssl=True, verify_certs=True, check_hostname=self.check_hostname)
            for key in ("ca", "certfile", "keyfile", "keyfile_password"):
                if getattr(self, key) is not None:
                    kwargs[key] = getattr(self, key)
            if self.certfile is not None and self.keyfile is None:
                # kazoo loads a client certificate only when given both files; a
                # PEM keystore holds the key with the chain (tests/integration/
                # test_zookeeper_tls.py: without this no certificate was sent).
                kwargs["keyfile"] = self.certfile
        return kwargs

    def acl_for(self, path: str) -> list[ACL] | None:
        """The ACL a znode created at ``path`` gets (None: kazoo's default, world-open)."""
        return default_acl(path) if self.set_acl else None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, body: dict) -> "ZkClientSecurity":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in body.items() if k in fields})


def is_sensitive(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in SENSITIVE_ROOT_PATHS)


def default_acl(path: str) -> list[ACL]:
    """Kafka's ZkData.defaultAcls(isSecure=true, path)."""
    return list(CREATOR_ALL_ACL) if is_sensitive(path) else [*CREATOR_ALL_ACL, *READ_ACL_UNSAFE]


# ---- from broker configuration ----------------------------------------------------------------


def read_digest_file(path: str | os.PathLike) -> str:
    text = Path(path).read_text().strip()
    if ":" not in text or not text.split(":", 1)[0]:
        raise ZkSecurityError(f"{path}: expected one line user:password")
    return text


def generate_digest_file(path: str | os.PathLike) -> str:
    """Credentials for the embedded ZooKeeper, made at its first start and kept."""
    path = Path(path)
    if path.exists():
        return read_digest_file(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    credentials = f"{DIGEST_USER}:{secrets.token_urlsafe(32)}"
    _write_private(path, credentials + "\n")
    return credentials


def from_config(config, digest_file: str | None = None) -> ZkClientSecurity:
    """The settings a broker's configuration asks for. ``digest_file`` (the
    embedded ZooKeeper's generated credentials) stands in for
    raykafka.zookeeper.digest.file when that is unset."""
    digest_file = config.get("raykafka.zookeeper.digest.file") or digest_file
    digest = read_digest_file(digest_file) if digest_file else None
    use_ssl = bool(config.get("zookeeper.ssl.client.enable", False))
    ssl_keys = [k for k in ("zookeeper.ssl.keystore.location", "zookeeper.ssl.truststore.location")
                if config.get(k)]
    if ssl_keys and not use_ssl:
        raise ZkSecurityError(f"{ssl_keys[0]} is set but zookeeper.ssl.client.enable is false")
    for key in ("zookeeper.ssl.keystore.type", "zookeeper.ssl.truststore.type"):
        kind = config.get(key)
        if kind and kind.upper() != "PEM":
            raise ZkSecurityError(f"{key}={kind}: only PEM files are supported for TLS to ZooKeeper")
    if config.get("zookeeper.ssl.truststore.password"):
        raise ZkSecurityError("zookeeper.ssl.truststore.password: a PEM truststore has no password")
    algorithm = config.get("zookeeper.ssl.endpoint.identification.algorithm", "HTTPS") or ""
    return ZkClientSecurity(
        set_acl=bool(config.get("zookeeper.set.acl", False)),
        digest=digest,
        use_ssl=use_ssl,
        ca=config.get("zookeeper.ssl.truststore.location") or None,
        certfile=config.get("zookeeper.ssl.keystore.location") or None,
        keyfile=None,
        keyfile_password=config.get("zookeeper.ssl.keystore.password") or None,
        check_hostname=algorithm.upper() == "HTTPS",
    )


# ---- the process-wide settings ---------------------------------------------------------------

_installed: ZkClientSecurity | None = None


def write_client_config(security: ZkClientSecurity, path: str | os.PathLike) -> str:
    """Write the settings for this broker's processes; returns the path to put in ENV_VAR."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, json.dumps(security.to_json()))
    return str(path)


def install(security: ZkClientSecurity | None) -> None:
    """Use ``security`` for every client this process opens from now on."""
    global _installed
    _installed = security


def current() -> ZkClientSecurity:
    """This process's settings: installed ones, else the file ENV_VAR names, else none."""
    global _installed
    if _installed is not None:
        return _installed
    path = os.environ.get(ENV_VAR)
    if not path:
        return ZkClientSecurity()
    try:
        body = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        # Never fall back to an unauthenticated session: its writes would be world-open.
        raise ZkSecurityError(f"{ENV_VAR}={path}: cannot read the ZooKeeper client settings ({exc})") from None
    _installed = ZkClientSecurity.from_json(body)
    return _installed


def kazoo_client(hosts: str, security: ZkClientSecurity | None = None, **kwargs):
    """A KazooClient with this process's ZooKeeper credentials, TLS and ACLs."""
    from kazoo.client import KazooClient

    security = current() if security is None else security
    return KazooClient(hosts=hosts, **security.kazoo_kwargs(), **kwargs)


def _write_private(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(temporary, 0o600)
    temporary.replace(path)
