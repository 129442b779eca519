"""PyTriton's exception types."""


class PyTritonError(Exception):
    """Base of PyTriton's errors."""

    def __init__(self, message: str):
        super().__init__(message)
        self._message = message

    @property
    def message(self) -> str:
        return self._message


class PyTritonValidationError(PyTritonError):
    """A configuration or a returned value is not valid."""


class PyTritonInvalidOperationError(PyTritonError):
    """The operation is not allowed in the current state."""


class PyTritonBadParameterError(PyTritonError):
    """A parameter has a value that cannot be used."""


class PyTritonModelConfigError(PyTritonError):
    """The model configuration is not valid."""


class PyTritonUnrecoverableError(PyTritonError):
    """Raised by an inference callable: the request fails and the server stops, as in PyTriton."""


class PyTritonClientError(PyTritonError):
    """Base of the client errors."""


class PyTritonClientTimeoutError(PyTritonClientError):
    """The server or model did not answer in time."""


class PyTritonClientModelUnavailableError(PyTritonClientError):
    """The model is not available."""


class PyTritonClientInferenceServerError(PyTritonClientError):
    """The server returned an error for the inference."""


class PyTritonClientValueError(PyTritonClientError):
    """A client argument is not valid."""
