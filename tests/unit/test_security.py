"""Issue 21 parts 1-3 without a broker: config keys and errors, the JAAS
parser, SCRAM math (RFC 7677's test vector) and exchange, PLAIN, DN
formatting and principal mapping rules, TLS contexts from PEM stores."""
from __future__ import annotations

import base64
import hashlib
import hmac
import ssl
import types

import pytest

from core.config import BrokerConfig, ConfigError
from core.security_config import listener_specs, rebind_first, shift_ports
from net.sasl import (AuthenticationFailed, JaasError, ScramServer, credential_from_string, credential_to_string,
                      parse_jaas_config, plain_check, salted_password, sanitize, scram_keys)
from net.tls import PrincipalMapper, normalise_pem, subject_dn
from node.config import load_broker_config

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def config(**overrides) -> BrokerConfig:
    return BrokerConfig.from_sources(overrides=[(k.replace("__", "."), v) for k, v in overrides.items()])


# ---------------------------------------------------------------- config

def test_listeners_and_protocol_map():
    c = BrokerConfig.from_sources(overrides=[
        ("listeners", "PLAINTEXT://127.0.0.1:9092,INTERNAL://:9093"),
        ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT"),
        ("listener.name.internal.sasl.enabled.mechanisms", "SCRAM-SHA-512")])
    specs = listener_specs(c)
    assert [(s.name, s.protocol, s.host, s.port) for s in specs] == [
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092), ("INTERNAL", "SASL_PLAINTEXT", "0.0.0.0", 9093)]


@pytest.mark.parametrize("overrides,key", [
    ([("listeners", "INTERNAL://:9093")], "listeners"),  # not a protocol, not in the map
    ([("listeners", "PLAINTEXT://:9092,PLAINTEXT://:9093")], "listeners"),
    ([("listeners", "PLAINTEXT://:9092,SSL://:9092")], "listeners"),
    ([("listener.security.protocol.map", "A:TLS")], "listener.security.protocol.map"),
    ([("listeners", "SASL_PLAINTEXT://:9093")], "sasl.enabled.mechanisms"),  # Kafka's default GSSAPI
    ([("listeners", "SASL_PLAINTEXT://:9093"), ("sasl.enabled.mechanisms", "OAUTHBEARER")],
     "sasl.enabled.mechanisms"),
    ([("listeners", "SASL_PLAINTEXT://:9093"), ("sasl.enabled.mechanisms", "PLAIN")],
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),  # named but not configured
    ([("listeners", "SASL_PLAINTEXT://:9093"), ("listener.name.sasl_plaintext.sasl.enabled.mechanisms", "PLAIN"),
      ("listener.name.sasl_plaintext.plain.sasl.jaas.config", "Broken required user_a=")],
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ([("listeners", "SSL://:9093")], "ssl.keystore.location"),
    ([("listeners", "SSL://:9093"), ("ssl.keystore.location", "/nonexistent.pem"), ("ssl.keystore.type", "PEM")],
     "ssl.keystore.location"),
    ([("listeners", "SSL://:9093"), ("ssl.keystore.location", "/x.jks")], "ssl.keystore.type"),
    ([("listener.name.nope.ssl.client.auth", "required")], "listener.name.nope.ssl.client.auth"),
    ([("listener.name.plaintext.ssl.client.auth", "sometimes")], "listener.name.plaintext.ssl.client.auth"),
    ([("listener.name.plaintext.ssl.unknown.key", "x")], "listener.name.plaintext.ssl.unknown.key"),
    ([("advertised.listeners", "SSL://h:1")], "advertised.listeners"),
    ([("advertised.listeners", "PLAINTEXT://0.0.0.0:1")], "advertised.listeners"),
])
def test_config_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as info:
        load_broker_config(overrides=overrides)
    assert info.value.key == key, str(info.value)


def test_listener_ports_for_more_nodes_and_replacements():
    assert shift_ports("PLAINTEXT://h:9092,SSL://h:9093,X://h:0", 2) == "PLAINTEXT://h:9094,SSL://h:9095,X://h:0"
    assert rebind_first("PLAINTEXT://h:0,SSL://h:9093", 41000) == "PLAINTEXT://h:41000,SSL://h:9093"


# ---------------------------------------------------------------- JAAS

def test_jaas_parser():
    [(module, flag, options)] = parse_jaas_config(JAAS)
    assert module == "org.apache.kafka.common.security.plain.PlainLoginModule" and flag == "required"
    assert options == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                       "user_alice": "alice-secret"}
    two = parse_jaas_config('A required k=v; B optional x="a \\"q\\" ; b";')
    assert two == [("A", "required", {"k": "v"}), ("B", "optional", {"x": 'a "q" ; b'})]
    for broken in ("A required k=v", "A maybe;", "A required k;", "required", 'A required k="v'):
        with pytest.raises(JaasError):
            parse_jaas_config(broken)


def test_plain():
    users = {"alice": "alice-secret"}
    assert plain_check(b"\x00alice\x00alice-secret", users) == "alice"
    assert plain_check(b"alice\x00alice\x00alice-secret", users) == "alice"
    for bad in (b"\x00alice\x00wrong", b"\x00bob\x00x", b"alice-secret", b"bob\x00alice\x00alice-secret",
                b"\x00\x00x", b"\x00alice\x00"):
        with pytest.raises(AuthenticationFailed):
            plain_check(bad, users)


# ---------------------------------------------------------------- SCRAM

def test_rfc7677_test_vector():
    """RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256, 4096 iterations."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    salted = salted_password("sha256", b"pencil", salt, 4096)
    stored_key, server_key = scram_keys("sha256", salted)
    client_first_bare = "n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    without_proof = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored_key, auth, "sha256").digest()))
    assert base64.b64encode(proof).decode() == "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    assert base64.b64encode(hmac.new(server_key, auth, "sha256").digest()).decode() == \
        "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _scram_client_exchange(mechanism: str, password: str, stored: str, user: str = "user"):
    import asyncio
    import secrets

    algorithm = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]

    async def lookup(name):
        return stored if name == "user" else None

    async def run():
        server = ScramServer(mechanism, lookup)
        nonce = secrets.token_hex(8)
        first_bare = f"n={user},r={nonce}"
        server_first = (await server.feed(f"n,,{first_bare}".encode())).decode()
        fields = dict(item.split("=", 1) for item in server_first.split(","))
        salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
        client_key = hmac.new(salted, b"Client Key", algorithm).digest()
        stored_key = hashlib.new(algorithm, client_key).digest()
        without_proof = f"c=biws,r={fields['r']}"
        auth = f"{first_bare},{server_first},{without_proof}".encode()
        proof = bytes(a ^ b for a, b in zip(client_key, hmac.new(stored_key, auth, algorithm).digest()))
        final = await server.feed(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
        server_key = hmac.new(salted, b"Server Key", algorithm).digest()
        assert final == b"v=" + base64.b64encode(hmac.new(server_key, auth, algorithm).digest())
        return server

    return asyncio.run(run())


@pytest.mark.parametrize("mechanism,algorithm", [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
def test_scram_exchange(mechanism, algorithm):
    salt = b"0123456789abcdef"
    stored_key, server_key = scram_keys(algorithm, salted_password(algorithm, b"secret", salt, 4096))
    stored = credential_to_string(salt, stored_key, server_key, 4096)
    assert credential_from_string(stored) == (salt, stored_key, server_key, 4096)
    assert stored.startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=") and stored.endswith(",iterations=4096")
    server = _scram_client_exchange(mechanism, "secret", stored)
    assert server.complete and server.user == "user"
    with pytest.raises(AuthenticationFailed):
        _scram_client_exchange(mechanism, "wrong", stored)
    with pytest.raises(AuthenticationFailed):
        _scram_client_exchange(mechanism, "secret", stored, user="nobody")


def test_sanitize_user_names():
    assert sanitize("alice") == "alice"
    assert sanitize("CN=alice,O=x") == "CN%3Dalice%2CO%3Dx"
    assert sanitize("a*b") == "a%2Ab"


def test_alter_validation():
    from net.apis.n51_alter_user_scram_credentials import validate

    up = lambda name, mechanism=1, iterations=4096: types.SimpleNamespace(  # noqa: E731
        name=name, mechanism=mechanism, iterations=iterations, salt=b"s", salted_password=b"p")
    delete = lambda name, mechanism=1: types.SimpleNamespace(name=name, mechanism=mechanism)  # noqa: E731
    errors, valid = validate([delete("d")], [up("ok"), up(""), up("few", iterations=100), up("many", iterations=20000),
                                              up("mech", mechanism=3), up("twice"), up("twice")])
    assert set(valid) == {"d", "ok"}
    assert {user: code.value for user, (code, _) in errors.items()} == {
        "": 93, "few": 93, "many": 93, "mech": 33, "twice": 92}


# ---------------------------------------------------------------- TLS, principals

def test_principal_mapping_rules():
    mapper = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
                             "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                             "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT")
    assert mapper.name("CN=kafka-server1,OU=ServiceUsers,O=Org") == "kafka-server1"
    assert mapper.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Cupertino,ST=CA,C=US") == "duke@javasoft"
    assert mapper.name("OU=x,CN=Foo.Bar,O=y") == "FOO.BAR"
    assert mapper.name("O=only") == "O=only"
    assert PrincipalMapper("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    assert PrincipalMapper(None).name("CN=a") == "CN=a"
    with pytest.raises(Exception):
        PrincipalMapper("RULE:^CN=(.*)$/$1/L").name("O=x")  # no rule applies
    with pytest.raises(ValueError):
        PrincipalMapper("RULE:[/x/")  # an invalid pattern


def test_subject_dn_is_rfc2253():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                        (("organizationalUnitName", "clients"),), (("commonName", "alice"),))}
    assert subject_dn(cert) == "CN=alice,OU=clients,O=Acme\\, Inc,C=US"


def test_tls_contexts_from_pem_stores(tmp_path):
    pytest.importorskip("cryptography")
    from tests.security_certs import make_pki

    pki = make_pki(tmp_path, key_password="kpw")
    base = [("listeners", "SSL://127.0.0.1:0"), ("ssl.keystore.type", "PEM")]
    load_broker_config(overrides=base + [("ssl.keystore.location", str(pki["broker"])),
                                         ("ssl.key.password", "kpw")])
    # Inline key and chain with their line breaks folded away, as a properties file's continuation lines do.
    fold = lambda path: path.read_text().replace("\n", "")  # noqa: E731
    inline = load_broker_config(overrides=base + [
        ("ssl.keystore.key", fold(pki["broker-key"])), ("ssl.keystore.certificate.chain", fold(pki["broker-chain"])),
        ("ssl.key.password", "kpw"), ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.certificates", fold(pki["ca"])), ("ssl.client.auth", "required"),
        ("ssl.enabled.protocols", "TLSv1.2"), ("ssl.cipher.suites", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256")])
    from net.tls import server_context

    context = server_context(inline, listener_specs(inline)[0])
    assert context.verify_mode == ssl.CERT_REQUIRED and context.maximum_version == ssl.TLSVersion.TLSv1_2
    assert normalise_pem(fold(pki["ca"])) == pki["ca"].read_text()
    for extra, key in [([("ssl.keystore.location", str(pki["broker"]))], "ssl.keystore.location"),  # no password
                       ([("ssl.keystore.location", str(pki["broker"])), ("ssl.key.password", "kpw"),
                         ("ssl.keystore.password", "x")], "ssl.keystore.password"),
                       ([("ssl.keystore.location", str(pki["broker"])), ("ssl.key.password", "kpw"),
                         ("ssl.cipher.suites", "NOT_A_SUITE")], "ssl.cipher.suites")]:
        with pytest.raises(ConfigError) as info:
            load_broker_config(overrides=base + extra)
        assert info.value.key == key


# ---- issue 28: secrets never leave DescribeConfigs, internal topics, topic names ----------------------

def test_describe_configs_hides_every_sensitive_value_and_synonym():
    from cluster.topic_admin import describe_broker_config_entries
    from core.config import BrokerConfig, is_sensitive_broker_key

    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="admin-secret" user_admin="admin-secret";')
    config = BrokerConfig.from_sources(overrides=[
        ("listeners", "SASL_PLAINTEXT://127.0.0.1:0"),
        ("sasl.enabled.mechanisms", "PLAIN"),
        ("sasl.jaas.config", jaas),
    ])
    entries = {e["name"]: e for e in describe_broker_config_entries(config)}
    jaas_entry = entries["sasl.jaas.config"]
    assert jaas_entry["sensitive"] and jaas_entry["value"] is None
    assert jaas_entry["synonyms"] and all(s["value"] is None for s in jaas_entry["synonyms"])
    assert "admin-secret" not in repr(entries)
    assert is_sensitive_broker_key("listener.name.sasl_ssl.plain.sasl.jaas.config")
    assert is_sensitive_broker_key("ssl.key.password") and is_sensitive_broker_key("no.such.key")
    assert not is_sensitive_broker_key("num.partitions")


def test_a_password_never_appears_in_a_config_error():
    from core.config import BROKER_CONFIGS, ConfigDef, ConfigError

    definition = BROKER_CONFIGS["ssl.key.password"]
    strict = ConfigDef(definition.name, "password", None, validator=lambda v: (_ for _ in ()).throw(ValueError(v)))
    with pytest.raises(ConfigError) as caught:
        strict.parse("top-secret")
    assert "top-secret" not in str(caught.value)


def test_topic_names_with_a_trailing_newline_are_illegal():
    from core.naming import topic_name_error

    assert topic_name_error("orders") is None
    assert topic_name_error("orders\n") is not None


def test_client_auth_without_a_trust_store_refuses_to_start(tmp_path):
    """Issue 28 item 10: the system's CA bundle must not vouch for client certificates."""
    pytest.importorskip("cryptography")
    from tests.security_certs import make_pki

    pki = make_pki(tmp_path, key_password="kpw")
    base = [("listeners", "SSL://127.0.0.1:0"), ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", str(pki["broker"])), ("ssl.key.password", "kpw")]
    for auth in ("required", "requested"):
        with pytest.raises(ConfigError) as info:
            load_broker_config(overrides=base + [("ssl.client.auth", auth)])
        assert info.value.key == "ssl.client.auth" and "trust store" in str(info.value)
    load_broker_config(overrides=base + [("ssl.client.auth", "required"), ("ssl.truststore.type", "PEM"),
                                         ("ssl.truststore.location", str(pki["ca"]))])


def test_a_certificate_no_rule_maps_fails_authentication():
    """Issue 28 item 10: Kafka fails the authentication; never User:ANONYMOUS."""
    from net.listeners import ListenerRuntime
    from net.tls import PrincipalMapper

    class Writer:
        closed = False

        def get_extra_info(self, name):
            return {"subject": ((("organizationName", "x"),),)} if name == "peercert" else None

        def close(self):
            self.closed = True

    class Conn:
        peer = "127.0.0.1:1"
        principal = "User:ANONYMOUS"
        closed = False
        writer = Writer()

    runtime = ListenerRuntime.__new__(ListenerRuntime)
    runtime.sasl, runtime.ssl_context = None, object()
    runtime.mapper = PrincipalMapper("RULE:^CN=(.*)$/$1/L")
    runtime.spec = type("Spec", (), {"name": "MTLS"})()
    conn = Conn()
    runtime.on_connect(conn)
    assert conn.principal is None and conn.closed and conn.writer.closed
