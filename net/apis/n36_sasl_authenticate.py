"""SaslAuthenticate (36): the tokens of the mechanism the handshake chose
(net/sasl.py). A failure is answered SASL_AUTHENTICATION_FAILED after
connection.failed.authentication.delay.ms, and the connection is closed."""
import asyncio
import logging

from core.error_codes import ErrorCode

from net.registry import api
from net.sasl import (MAX_TOKEN_BYTES, SCRAM_MECHANISMS, AuthenticationFailed, IllegalSaslState, ScramServer,
                      close_after_response, plain_check)
from net.schema_build import build, response_schema_for
from net.server import CloseConnection

log = logging.getLogger("raykafka.sasl")

_TESTS = ("tests/integration/test_security.py::test_sasl_plain_confluent",
          "tests/integration/test_security.py::test_sasl_scram_confluent",
          "tests/integration/test_security.py::test_wrong_password_fails",
          "tests/integration/test_security.py::test_sasl_ssl_confluent")


def _authenticated(ctx, principal: str) -> None:
    conn = ctx.conn
    conn.principal = principal
    conn.max_request_bytes = ctx.edge.config["socket.request.max.bytes"]  # the bound of an authenticated client


@api(36, 0, 2, tests=_TESTS)
async def handle_sasl_authenticate(ctx, request):
    schema = response_schema_for(request)
    conn = ctx.conn
    listener = getattr(conn, "listener", None)
    sasl = listener.sasl if listener is not None else None
    if sasl is None or conn.sasl is None or conn.principal is not None:
        return build(schema, error_code=ErrorCode.illegal_sasl_state,
                     error_message="SaslAuthenticate on a connection that is not authenticating", auth_bytes=b"")
    state = conn.sasl
    if state.mechanism is None or state.failed:
        raise CloseConnection("SaslAuthenticate before a successful SaslHandshake")
    token = bytes(request.auth_bytes)
    try:
        if len(token) > MAX_TOKEN_BYTES:
            raise AuthenticationFailed(f"SASL token of {len(token)} bytes is over the limit of {MAX_TOKEN_BYTES}")
        if state.mechanism == "PLAIN":
            _authenticated(ctx, "User:" + plain_check(token, sasl.plain_users))
            answer = b""
        elif state.mechanism in SCRAM_MECHANISMS:
            if state.scram is None:
                mechanism = state.mechanism
                state.scram = ScramServer(mechanism, lambda user: sasl.lookup(user, mechanism))
            answer = await state.scram.feed(token)
            if state.scram.complete:
                _authenticated(ctx, "User:" + state.scram.user)
                state.scram = None
        else:  # cannot happen: the handshake only accepts enabled mechanisms
            raise AuthenticationFailed(f"mechanism {state.mechanism} is not served")
    except IllegalSaslState as exc:
        raise CloseConnection(str(exc)) from None
    except AuthenticationFailed as exc:
        state.failed = True
        log.info("failed authentication of %s on listener %s (%s): %s", conn.peer, listener.spec.name,
                 state.mechanism, exc)
        await asyncio.sleep(sasl.failed_delay_s)
        close_after_response(conn)
        return build(schema, error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc),
                     auth_bytes=b"")
    return build(schema, error_code=ErrorCode.none, error_message=None, auth_bytes=answer)
