"""What an inference callable receives: PyTriton's `Request` (a mapping of input name to numpy
array, plus `.parameters`)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Dict, Optional

import numpy as np


class Request(MutableMapping):
    """One inference request: `request["INPUT"]` is a numpy array (a read-only view of the
    request's bytes where the dtype allows); `request.parameters` its parameters.

    The mapping methods go straight to `data` (a dict) rather than through MutableMapping's
    generic ones: they run on every request."""

    __slots__ = ("data", "parameters", "requested_output_names")

    def __init__(self, data: Dict[str, np.ndarray], parameters: Optional[Dict[str, Any]] = None,
                 requested_output_names: Optional[list] = None):
        self.data = data
        self.parameters = parameters or {}
        self.requested_output_names = requested_output_names

    def __getitem__(self, key: str) -> np.ndarray:
        return self.data[key]

    def __setitem__(self, key: str, value: np.ndarray) -> None:
        self.data[key] = value

    def __delitem__(self, key: str) -> None:
        del self.data[key]

    def __iter__(self):
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __contains__(self, key: object) -> bool:
        return key in self.data

    def keys(self):
        return self.data.keys()

    def values(self):
        return self.data.values()

    def items(self):
        return self.data.items()

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def __repr__(self) -> str:
        return f"Request({ {k: (v.dtype, v.shape) for k, v in self.data.items()} }, parameters={self.parameters})"
