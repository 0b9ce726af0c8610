"""Errors with TF Serving's status codes, mapped to HTTP and gRPC the way TF Serving maps them."""

from __future__ import annotations


class ServingError(Exception):
    """An error a client sees; `code` is a TF Serving (absl) status code name."""

    code = "INTERNAL"
    http_status = 500


class InvalidArgument(ServingError):
    code, http_status = "INVALID_ARGUMENT", 400


class NotFound(ServingError):
    code, http_status = "NOT_FOUND", 404


class FailedPrecondition(ServingError):
    code, http_status = "FAILED_PRECONDITION", 400


class Unavailable(ServingError):
    code, http_status = "UNAVAILABLE", 503


class ResourceExhausted(ServingError):
    code, http_status = "RESOURCE_EXHAUSTED", 413


class Internal(ServingError):
    code, http_status = "INTERNAL", 500
