"""A minimal blocking Kafka wire client built on kio, for protocol-level tests."""
from __future__ import annotations

import socket
import struct

from net.codec import decode_response, encode_request, request_schema


class WireClient:
    def __init__(self, bootstrap: str, timeout: float = 30.0):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes | None:
        """One response frame, or None when the broker closed the connection."""
        head = self._recv_exactly(4)
        if head is None:
            return None
        return self._recv_exactly(struct.unpack(">i", head)[0])

    def _recv_exactly(self, n: int) -> bytes | None:
        chunks = []
        while n:
            try:
                chunk = self.sock.recv(n)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def request(self, api_key: int, version: int, **fields):
        self.correlation_id += 1
        schema = request_schema(api_key, version)
        self.send_raw(encode_request(schema(**fields), self.correlation_id))
        frame = self.recv_frame()
        assert frame is not None, "connection closed by broker"
        correlation_id, body = decode_response(api_key, version, frame)
        assert correlation_id == self.correlation_id
        return body

    def close(self) -> None:
        self.sock.close()
