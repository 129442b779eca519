"""The KServe error shape and the status codes Triton answers with, for the integration tests
(tessera_testlib re-exports these).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import requests


def error_message(resp: requests.Response) -> str:
    """The 'error' string of a KServe error response; asserts the body has that shape."""
    try:
        body = resp.json()
    except ValueError:
        raise AssertionError(f"error response is not JSON (HTTP {resp.status_code}): {resp.text[:500]!r}")
    assert isinstance(body, dict) and isinstance(body.get("error"), str), (
        f'error response is not {{"error": "..."}}: {body!r}'
    )
    msg = body["error"]
    assert msg.strip(), "error message is empty"
    return msg


def assert_error(resp: requests.Response, status: int | Iterable[int], *needles: str,
                 any_of: Sequence[str] = ()) -> str:
    """Status code (exact, or one of a set) + {"error": msg} body where msg contains every needle
    (case-insensitive) and at least one of any_of (when given)."""
    allowed = {status} if isinstance(status, int) else set(status)
    assert resp.status_code in allowed, (
        f"expected HTTP {sorted(allowed)}, got {resp.status_code}: {resp.text[:1000]!r}"
    )
    msg = error_message(resp)
    low = msg.lower()
    for n in needles:
        assert n.lower() in low, f"error message does not mention {n!r}: {msg!r}"
    if any_of:
        assert any(n.lower() in low for n in any_of), f"error message mentions none of {list(any_of)}: {msg!r}"
    return msg


# ---------------------------------------------------------------------------------------------
# Expected status codes: those of the real Triton 2.51, recorded in docs/triton-http-behaviour.md.
# (Triton maps INVALID_ARG -> 400, NOT_FOUND -> 404, UNAVAILABLE -> 503, UNSUPPORTED -> 501,
# INTERNAL -> 500; its HTTP front end reports JSON *parsing* problems as INTERNAL, hence the 500s.)
# ---------------------------------------------------------------------------------------------

BAD_REQUEST = 400
NOT_FOUND = 404
METHOD_NOT_ALLOWED = 405
INTERNAL = 500
NOT_IMPLEMENTED = 501
UNAVAILABLE = 503

EXPECT = {
    "malformed_json": INTERNAL,            # "failed to parse the request JSON buffer: Invalid value. at 19"
    "empty_body": BAD_REQUEST,             # treated as a raw-binary request: "Raw request must only have 1 input ..."
    "non_object_json": INTERNAL,           # "Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"
    "inputs_not_array": INTERNAL,          # "Unable to parse 'inputs': attempt to access JSON non-array as array"
    "deeply_nested_json": INTERNAL,        # top-level nesting: same as non-object JSON
    "wrong_dtype": BAD_REQUEST,            # "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"
    "invalid_dtype_name": BAD_REQUEST,     # "invalid datatype for input INPUT0"
    "wrong_shape": BAD_REQUEST,            # "unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]. ..."
    "batch_mismatch": BAD_REQUEST,         # "input 'INPUT0' batch size does not match other inputs for 'simple'"
    "element_count": INTERNAL,             # "Unable to parse 'data': Shape does not match true shape of 'data' field"
    "data_json_type": INTERNAL,            # "Unable to parse 'data': attempt to access JSON non-signed-integer as signed-integer"
    "missing_input": BAD_REQUEST,          # "expected 2 inputs but got 1 inputs for model 'simple'. ... ['INPUT1'] ..."
    "unknown_input": BAD_REQUEST,          # "expected 2 inputs but got 3 inputs ... Got input(s) ['BOGUS', ...]"
    "duplicate_input": BAD_REQUEST,        # "input 'INPUT0' already exists in request"
    "unknown_model": NOT_FOUND,            # "Request for unknown model: 'nosuch' is not found"
    "unknown_version": NOT_FOUND,          # "Request for unknown model: 'simple' version 9 is not found"
    "bad_version_path": NOT_FOUND,         # /versions/abc/...: router-level {"error":"Not Found"}
    "model_not_ready": BAD_REQUEST,        # GET .../ready: {"error":"Model version not ready"}
    "unknown_output": BAD_REQUEST,         # "unexpected inference output 'NOPE' for model 'simple'"
    "batch_too_large": BAD_REQUEST,        # "inference request batch-size must be <= 8 for 'simple'"
    "header_length_out_of_range": BAD_REQUEST,  # "inference header size should be in range (0, 402), got: 1000"
    "header_length_cuts_json": INTERNAL,   # JSON parse error at the cut
    "binary_short": BAD_REQUEST,           # "unexpected size for input 'INPUT1', expecting 4 additional bytes for model 'simple'"
    "binary_long": BAD_REQUEST,            # "unexpected additional input data for model 'simple'"
    "byte_size_mismatch": BAD_REQUEST,     # "input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60"
    "data_and_binary": BAD_REQUEST,        # "Input must set only one of the following fields: ... But set 'data' 'binary_data_size'"
    "no_data": BAD_REQUEST,                # "... But no field is set"
    "bad_compressed_body": BAD_REQUEST,    # Triton: decompression failure leaves an empty body -> raw-request 400
    "unsupported_encoding": NOT_IMPLEMENTED,  # {"error":"Unsupported compression type"} + Accept-Encoding: gzip, deflate
    "body_too_large": {BAD_REQUEST, 413},  # not recorded from Triton; Triton's --http-max-input-size default is 64 MiB
    "unknown_url": NOT_FOUND,              # {"error":"Not Found"}
    "wrong_method": METHOD_NOT_ALLOWED,    # {"error":"Method Not Allowed"}
    "load_in_none_mode": UNAVAILABLE,      # "explicit model load / unload is not allowed if polling is enabled"
    "load_unknown_model": INTERNAL,        # "failed to load 'nosuch', failed to poll from model repository"
    "load_bad_override": INTERNAL,         # same message for an override that is not valid JSON
    "stats_unknown_model": BAD_REQUEST,    # "requested model 'nosuch' is not available"
    "server_not_ready": BAD_REQUEST,       # /v2/health/ready once any model failed to load (strict readiness)
}
