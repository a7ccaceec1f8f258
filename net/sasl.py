"""SASL on SASL_PLAINTEXT and SASL_SSL listeners: PLAIN and SCRAM-SHA-256/512.

A connection on a SASL listener may send only ApiVersions (18),
SaslHandshake (17) and SaslAuthenticate (36) until it has authenticated;
anything else closes it, as Kafka's SaslServerAuthenticator does
(`gate`). The handshake picks a mechanism among the listener's
``sasl.enabled.mechanisms``; SaslAuthenticate carries the mechanism's
tokens. A failed exchange is answered SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms`` and the connection is closed.

PLAIN's users are the ``user_<name>="<password>"`` options of the
listener's JAAS config (``listener.name.<l>.plain.sasl.jaas.config``, then
``sasl.jaas.config``), Kafka's PlainLoginModule format.

SCRAM (RFC 5802, RFC 7677) credentials live in ZooKeeper under
/config/users/<user> in Kafka's format (ScramCredentialUtils):
``{"version":1,"config":{"SCRAM-SHA-256":"salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>"}}``,
written with a /config/changes notification. An authentication reads the
user's znode afresh (one read per new connection), so a changed or deleted
credential counts from the next connection on, on every edge, with no
cache to invalidate.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import re
import secrets
import threading
import urllib.parse
from typing import Any, Awaitable, Callable

from core.security_config import ListenerSpec, listener_value, sasl_mechanisms

log = logging.getLogger("raykafka.sasl")

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
# A SASL token is a few hundred bytes; bound what one request may carry.
MAX_TOKEN_BYTES = 64 * 1024

# Kafka's ScramMechanism: (hash, type byte of Describe/AlterUserScramCredentials, min iterations).
SCRAM_MECHANISMS = {"SCRAM-SHA-256": ("sha256", 1, 4096), "SCRAM-SHA-512": ("sha512", 2, 4096)}
SCRAM_MAX_ITERATIONS = 16384  # Kafka's AlterUserScramCredentials upper bound
SCRAM_BY_TYPE = {kind: name for name, (_, kind, _) in SCRAM_MECHANISMS.items()}


class AuthenticationFailed(Exception):
    """The client's credentials are wrong (message safe to send to the client)."""


class IllegalSaslState(Exception):
    """A request out of order (Kafka closes the connection)."""


# ------------------------------------------------------------------ JAAS

class JaasError(ValueError):
    pass


_JAAS_TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|([;=])|([^\s;="]+))')


def parse_jaas_config(text: str) -> list[tuple[str, str, dict[str, str]]]:
    """Kafka's JaasConfig grammar: ``<LoginModuleClass> <flag> [key=value ...];`` repeated.
    -> [(module class, control flag, options)]. Values may be quoted ("...", with \\ escapes)."""
    tokens: list[tuple[str, str]] = []
    position, text = 0, text.strip()
    while position < len(text):
        match = _JAAS_TOKEN.match(text, position)
        if match is None or match.end() == position:
            raise JaasError(f"unexpected character at {position} of the JAAS config")
        if match.group(1) is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", match.group(1)[1:-1])))
        elif match.group(2) is not None:
            tokens.append((match.group(2), match.group(2)))
        else:
            tokens.append(("word", match.group(3)))
        position = match.end()
        while position < len(text) and text[position].isspace():
            position += 1
    modules: list[tuple[str, str, dict[str, str]]] = []
    i = 0
    while i < len(tokens):
        if tokens[i][0] != "word":
            raise JaasError("expected a login module class name")
        module = tokens[i][1]
        if i + 1 >= len(tokens) or tokens[i + 1][0] != "word" or \
                tokens[i + 1][1].lower() not in ("required", "requisite", "sufficient", "optional"):
            raise JaasError(f"login module {module}: expected a control flag (required, requisite, sufficient, "
                            f"optional)")
        flag, i, options = tokens[i + 1][1].lower(), i + 2, {}
        while i < len(tokens) and tokens[i][0] != ";":
            if tokens[i][0] != "word" or i + 2 >= len(tokens) or tokens[i + 1][0] != "=" or \
                    tokens[i + 2][0] not in ("word", "value"):
                raise JaasError(f"login module {module}: expected key=value options")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise JaasError(f"login module {module}: missing the closing ';'")
        modules.append((module, flag, options))
        i += 1
    return modules


def plain_users(config, spec: ListenerSpec) -> dict[str, str]:
    """PLAIN's users of a listener, from its JAAS config's user_<name> options; ConfigError
    (naming the key) when PLAIN has no JAAS config or it is malformed."""
    from core.config import ConfigError

    key = f"{spec.prefix}plain.sasl.jaas.config"
    text = listener_value(config, spec, "sasl.jaas.config", mechanism="PLAIN")
    values = config.as_dict() if hasattr(config, "as_dict") else config
    if values.get(key) is None:
        key = f"{spec.prefix}sasl.jaas.config" if values.get(f"{spec.prefix}sasl.jaas.config") is not None \
            else "sasl.jaas.config"
    if not text:
        raise ConfigError(f"{spec.prefix}plain.sasl.jaas.config",
                          f"PLAIN is enabled on listener {spec.name} but has no JAAS config "
                          f"(listener.name.{spec.name.lower()}.plain.sasl.jaas.config or sasl.jaas.config)")
    try:
        modules = parse_jaas_config(text)
    except JaasError as exc:
        raise ConfigError(key, str(exc)) from None
    if len(modules) != 1:
        raise ConfigError(key, f"JAAS config property contains {len(modules)} login modules, should be 1 module")
    module, _, options = modules[0]
    if not module.endswith("PlainLoginModule"):
        raise ConfigError(key, f"PLAIN needs org.apache.kafka.common.security.plain.PlainLoginModule, got {module}")
    return {name[len("user_"):]: password for name, password in options.items() if name.startswith("user_")}


# ------------------------------------------------------------------ SCRAM math (RFC 5802)

def _h(algorithm: str, data: bytes) -> bytes:
    return hashlib.new(algorithm, data).digest()


def _hmac(algorithm: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, algorithm).digest()


def salted_password(algorithm: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(algorithm, password, salt, iterations)


def scram_keys(algorithm: str, salted: bytes) -> tuple[bytes, bytes]:
    """-> (stored key, server key) of a salted password."""
    client_key = _hmac(algorithm, salted, b"Client Key")
    return _h(algorithm, client_key), _hmac(algorithm, salted, b"Server Key")


def credential_to_string(salt: bytes, stored_key: bytes, server_key: bytes, iterations: int) -> str:
    """Kafka's ScramCredentialUtils.credentialToString."""
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    return f"salt={b64(salt)},stored_key={b64(stored_key)},server_key={b64(server_key)},iterations={iterations}"


def credential_from_string(text: str) -> tuple[bytes, bytes, bytes, int]:
    props = {}
    for token in text.split(","):
        index = token.find("=")
        if index <= 0:
            raise ValueError("credentials not valid")
        props[token[:index]] = token[index + 1:]
    if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
        raise ValueError("credentials not valid")
    return (base64.b64decode(props["salt"]), base64.b64decode(props["stored_key"]),
            base64.b64decode(props["server_key"]), int(props["iterations"]))


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize (URL-encoding, "*" as %2A): a user name as a znode name."""
    return urllib.parse.quote(name, safe="._-").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


class ScramServer:
    """One SCRAM exchange, server side. feed(client token) -> server token;
    raises AuthenticationFailed. `lookup(user) -> credential string or None` runs
    off the event loop (a ZooKeeper read)."""

    def __init__(self, mechanism: str, lookup: Callable[[str], Awaitable[str | None]]):
        self.mechanism = mechanism
        self.algorithm, _, self.min_iterations = SCRAM_MECHANISMS[mechanism]
        self.lookup = lookup
        self.state = "first"
        self.user: str | None = None

    async def feed(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Authentication failed: invalid SCRAM message") from None
        if self.state == "first":
            return await self._client_first(text)
        if self.state == "final":
            return self._client_final(text)
        raise IllegalSaslState(f"unexpected SCRAM message in state {self.state}")

    async def _client_first(self, text: str) -> bytes:
        # gs2-header: "n,," or "y,," or "n,a=authzid," ; then "n=user,r=nonce[,extensions]".
        match = re.fullmatch(r"([nyp][^,]*),(a=[^,]*)?,(n=([^,]*),r=([^,]+)(?:,.*)?)", text, re.S)
        if match is None or match.group(1).startswith("p"):
            raise AuthenticationFailed("Authentication failed: invalid SCRAM client-first message")
        self.client_first_bare = match.group(3)
        username = match.group(4).replace("=2C", ",").replace("=3D", "=")
        authzid = (match.group(2) or "a=")[2:].replace("=2C", ",").replace("=3D", "=")
        self.client_nonce = match.group(5)
        self.state = "failed"
        credential = await self.lookup(username) if username else None
        if credential is None:
            raise AuthenticationFailed("Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        try:
            self.salt, self.stored_key, self.server_key, iterations = credential_from_string(credential)
        except (ValueError, TypeError):
            raise AuthenticationFailed("Authentication failed: Credentials could not be obtained") from None
        if iterations < self.min_iterations:
            raise AuthenticationFailed("Authentication failed: Credentials could not be obtained")
        self.user = username
        self.nonce = self.client_nonce + base64.b64encode(secrets.token_bytes(18)).decode().replace("/", "_")
        self.server_first = f"r={self.nonce},s={base64.b64encode(self.salt).decode()},i={iterations}"
        self.state = "final"
        return self.server_first.encode()

    def _client_final(self, text: str) -> bytes:
        self.state = "failed"
        match = re.fullmatch(r"(c=([^,]*),r=([^,]*)(?:,.*?)?),p=([^,]+)", text, re.S)
        if match is None or match.group(3) != self.nonce:
            raise AuthenticationFailed("Authentication failed: Invalid client final message")
        without_proof, proof_b64 = match.group(1), match.group(4)
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError:
            raise AuthenticationFailed("Authentication failed: Invalid client final message") from None
        signature = _hmac(self.algorithm, self.stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthenticationFailed("Authentication failed: Invalid client final message")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(_h(self.algorithm, client_key), self.stored_key):
            raise AuthenticationFailed("Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}")
        server_signature = _hmac(self.algorithm, self.server_key, auth_message)
        self.state = "done"
        return b"v=" + base64.b64encode(server_signature)

    @property
    def complete(self) -> bool:
        return self.state == "done"


def plain_check(token: bytes, users: dict[str, str]) -> str:
    """RFC 4616 message authzid NUL authcid NUL passwd -> the user name."""
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid SASL/PLAIN response") from None
    if not user:
        raise AuthenticationFailed("Authentication failed: username not specified")
    if not password:
        raise AuthenticationFailed("Authentication failed: password not specified")
    expected = users.get(user)
    if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
        raise AuthenticationFailed("Authentication failed: Invalid username or password")
    if authzid and authzid != user:
        raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is different "
                                   "from username")
    return user


# ------------------------------------------------------------------ credentials in ZooKeeper

class ScramStore:
    """SCRAM credentials in /config/users/<sanitized user>, Kafka's format, through a
    ZooKeeper session of its own, opened on first use (blocking calls: run them
    in an executor).

    Lookups come from memory, as Kafka's CredentialCache: every user's
    credentials are read once (at the first lookup), then each /config/changes
    notification for a user entity rereads that user only. An unauthenticated
    client's first SCRAM message therefore costs no ZooKeeper read."""

    def __init__(self, zk):
        """`zk`: the process's ZooKeeper client (metadata.kafka_zk.KafkaZkClient), started or
        starting; shared, so close() leaves it open."""
        self._zk = zk
        self._lock = threading.Lock()
        self._cache: dict[str, dict[str, str]] | None = None  # user -> {mechanism: credential}
        self._last_change: str | None = None  # the newest /config/changes entry applied
        self._watch = None

    def _client(self):
        return self._zk

    def user_config(self, user: str) -> dict[str, str]:
        from metadata import zk_paths

        return self._client().configs.get(zk_paths.CONFIG_ENTITY_USERS, sanitize(user))

    def credential(self, user: str, mechanism: str) -> str | None:
        cache = self._cache if self._cache is not None else self._start_cache()
        return cache.get(user, {}).get(mechanism)

    # ---- the in-memory cache ----------------------------------------------------------------
    def _start_cache(self) -> dict[str, dict[str, str]]:
        """Load every user's credentials and follow the change notifications (once)."""
        with self._lock:
            if self._cache is not None:
                return self._cache
        zk = self._client()
        names = zk.configs.change_names()  # what the full load below includes
        cache = self._read_all()
        with self._lock:
            if self._cache is None:
                self._cache = cache
                self._last_change = names[-1] if names else ""
                self._watch = zk.configs.watch_changes(self._on_changes)
            return self._cache

    def _read_all(self) -> dict[str, dict[str, str]]:
        return {user: _scram_only(self.user_config(user)) for user in self.users()}

    def _on_changes(self, names: list[str]) -> None:
        """Blocking (the ZooKeeper client's event thread): reread the users that changed."""
        from metadata import zk_paths

        last = self._last_change or ""
        fresh = [n for n in names if n > last]
        if not fresh:
            return
        try:
            if last and last not in names and names and names[0] > last:
                # Notifications we never saw were purged: anything may have changed.
                self._cache = self._read_all()
            else:
                zk = self._client()
                for name in fresh:
                    body = zk.configs.change_notification(name) or {}
                    parts = str(body.get("entity_path", "")).split("/")
                    if len(parts) == 2 and parts[0] == zk_paths.CONFIG_ENTITY_USERS:
                        self._refresh(desanitize(parts[1]))
            self._last_change = fresh[-1]
        except Exception:  # ZooKeeper away: keep what is known; the next notification retries
            log.exception("reading SCRAM credential changes failed; keeping the ones known")

    def _refresh(self, user: str) -> None:
        credentials = _scram_only(self.user_config(user))
        cache = dict(self._cache or {})
        if credentials:
            cache[user] = credentials
        else:
            cache.pop(user, None)
        self._cache = cache  # replaced whole: readers on other threads see one or the other

    def users(self) -> list[str]:
        from metadata import zk_paths

        zk = self._client()
        names = zk.configs.entity_names(zk_paths.CONFIG_ENTITY_USERS)
        return sorted(desanitize(name) for name in names)

    def alter(self, user: str, set_mechanisms: dict[str, str], delete_mechanisms: list[str]) -> None:
        """Replace/remove credentials of one user, keeping its other keys (quotas), and announce it."""
        from metadata import zk_paths

        config = self.user_config(user)
        for mechanism in delete_mechanisms:
            config.pop(mechanism, None)
        config.update(set_mechanisms)
        self._client().configs.set(zk_paths.CONFIG_ENTITY_USERS, sanitize(user), config)
        if self._cache is not None:
            self._refresh(user)  # this edge at once; the others through the notification

    def close(self) -> None:
        with self._lock:
            if self._watch is not None:
                self._watch.cancel()
                self._watch = None


def _scram_only(config: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in config.items() if k in SCRAM_MECHANISMS}


# ------------------------------------------------------------------ per-connection state

class SaslState:
    """What a connection on a SASL listener has done so far."""
    __slots__ = ("mechanism", "scram", "failed")

    def __init__(self):
        self.mechanism: str | None = None
        self.scram: ScramServer | None = None
        self.failed = False


class SaslListener:
    """A SASL listener's settings, shared by its connections."""

    def __init__(self, config, spec: ListenerSpec, store: ScramStore | None):
        self.spec = spec
        self.mechanisms = sasl_mechanisms(config, spec)
        self.plain_users = plain_users(config, spec) if "PLAIN" in self.mechanisms else {}
        self.store = store
        self.failed_delay_s = config["connection.failed.authentication.delay.ms"] / 1000
        self.max_receive_bytes = config["sasl.server.max.receive.size"]

    async def lookup(self, user: str, mechanism: str) -> str | None:
        if self.store is None:
            return None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.store.credential, user, mechanism)


async def _refuse(message: str):
    from net.server import CloseConnection

    raise CloseConnection(message)


def gate(dispatch: Callable[..., Any]) -> Callable[..., Any]:
    """The dispatch of a SASL listener: before authentication, only ApiVersions,
    SaslHandshake and SaslAuthenticate pass; anything else closes the connection
    (Kafka: IllegalSaslStateException). A PLAINTEXT or SSL listener never runs this."""
    def gated(conn, api_key: int, api_version: int, correlation_id: int, frame):
        if conn.principal is None and api_key not in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return _refuse(f"request (api key {api_key}) before SASL authentication on listener "
                           f"{conn.listener.spec.name}")
        return dispatch(conn, api_key, api_version, correlation_id, frame)

    return gated


def close_after_response(conn) -> None:
    """Close `conn` once its pending responses are written (the failed
    authentication's answer goes out first: transport.close() flushes)."""
    async def closer():
        for _ in range(200):
            if not conn.inflight or conn.closed:
                break
            await asyncio.sleep(0.005)
        if not conn.closed:
            conn.closed = True
            conn.space.set()
            conn.writer.close()

    asyncio.ensure_future(closer())
