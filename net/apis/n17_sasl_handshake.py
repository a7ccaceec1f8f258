"""SaslHandshake (17): pick the SASL mechanism of a connection on a SASL
listener (net/sasl.py). v1 only: v0's raw tokens after the handshake are not
served (every client of the last five years sends v1, then SaslAuthenticate)."""
from core.error_codes import ErrorCode

from net.registry import api
from net.sasl import close_after_response
from net.schema_build import build, response_schema_for
from net.server import CloseConnection

_TESTS = ("tests/integration/test_security.py::test_sasl_plain_confluent",
          "tests/integration/test_security.py::test_unknown_mechanism_is_refused")


@api(17, 1, 1, tests=_TESTS)
async def handle_sasl_handshake(ctx, request):
    schema = response_schema_for(request)
    conn = ctx.conn
    listener = getattr(conn, "listener", None)
    sasl = listener.sasl if listener is not None else None
    if sasl is None or conn.sasl is None or conn.principal is not None:
        # Not a SASL listener, or already authenticated: Kafka's KafkaApis answer.
        return build(schema, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    if conn.sasl.mechanism is not None:
        raise CloseConnection("a second SaslHandshake on one connection")
    mechanism = request.mechanism
    if mechanism not in sasl.mechanisms:
        # Kafka answers with the mechanisms it offers, then closes the connection.
        close_after_response(conn)
        return build(schema, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=tuple(sasl.mechanisms))
    conn.sasl.mechanism = mechanism
    return build(schema, error_code=ErrorCode.none, mechanisms=tuple(sasl.mechanisms))
