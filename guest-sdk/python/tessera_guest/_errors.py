"""TritonError and TritonModelException, as in triton_python_backend_utils."""


class TritonError(Exception):
    """An error for an InferenceResponse: TritonError(message, code=TritonError.INTERNAL).

    The codes are Triton's TRITONSERVER_Error_Code values; Tessera maps them to HTTP / gRPC
    statuses like Triton does. Unlike Triton's, it is also an Exception, so it can be raised from
    execute() (every request of the batch then fails with it).
    """

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message, code=INTERNAL):
        super().__init__(message)
        self._message = str(message)
        self._code = int(code)

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __repr__(self):
        return "TritonError(%r, code=%d)" % (self._message, self._code)


class TritonModelException(Exception):
    """Raised by the SDK when a host call fails (a BLS call, creating a tensor, sending a
    response); raise it from execute() to fail every request of the batch."""

    def __init__(self, message, code=TritonError.INTERNAL):
        super().__init__(message)
        self._code = int(code)

    def message(self):
        return str(self.args[0]) if self.args else ""

    def code(self):
        return self._code
