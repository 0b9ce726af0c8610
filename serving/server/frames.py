"""The wire between the model process and its gRPC front-end processes (`grpc_front.py`).

Each front end holds one Unix-socket connection to the model process and sends every gRPC
call over it as a frame; the model process answers with one frame per call. A frame is a
9-byte header (payload length, call id, kind; big-endian) and its payload:

  HELLO   front -> model  payload: the gRPC port the front end listens on (ASCII)
  CALL    front -> model  payload: one byte, the index in METHODS; then the request message
  KEYED   front -> model  a CALL whose client sent `x-request-id` metadata: one byte, the index
                          in METHODS; two bytes (big-endian), the key's length; the key (UTF-8);
                          then the request message
  CANCEL  front -> model  the client gave up on the call (deadline, cancel, disconnect)
  REPLY   model -> front  payload: the response message
  ERROR   model -> front  payload: gRPC status code name, a newline, then the details (UTF-8)
  STOP    model -> front  stop listening; answer the calls in flight within `payload` seconds

Messages travel as the bytes gRPC received and sends: the front end never parses them, so
it imports neither TensorFlow nor the TF Serving protos.
"""

from __future__ import annotations

import struct

HEADER = struct.Struct(">IIB")
HELLO, CALL, CANCEL, REPLY, ERROR, STOP, KEYED = range(7)
KEY_LENGTH = struct.Struct(">H")

# TF Serving's gRPC methods (prediction_service.proto, model_service.proto), in the order
# their services declare them; tests check this against the protos' descriptors.
METHODS = (
    "/tensorflow.serving.PredictionService/Classify",
    "/tensorflow.serving.PredictionService/Regress",
    "/tensorflow.serving.PredictionService/Predict",
    "/tensorflow.serving.PredictionService/MultiInference",
    "/tensorflow.serving.PredictionService/GetModelMetadata",
    "/tensorflow.serving.ModelService/GetModelStatus",
    "/tensorflow.serving.ModelService/HandleReloadConfigRequest",
)


def pack(kind: int, call_id: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(len(payload), call_id, kind) + payload


def error_payload(code: str, details: str) -> bytes:
    return code.encode() + b"\n" + details.encode("utf-8", "replace")


def parse_error(payload: bytes) -> tuple[str, str]:
    code, _, details = payload.partition(b"\n")
    return code.decode(), details.decode("utf-8", "replace")


class Reader:
    """Splits a byte stream into frames, whatever the chunk boundaries."""

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """The (kind, call id, payload) of every frame `data` completes."""
        buffer = self._buffer
        buffer += data
        frames, at, size = [], 0, HEADER.size
        while len(buffer) - at >= size:
            length, call_id, kind = HEADER.unpack_from(buffer, at)
            end = at + size + length
            if len(buffer) < end:
                break
            frames.append((kind, call_id, bytes(buffer[at + size:end])))
            at = end
        del buffer[:at]
        return frames
