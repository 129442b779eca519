"""PyTriton's inference-callable decorators: `batch`, `sample`, `group_by_keys`,
`group_by_values`, `fill_optionals`, `first_value`, `pad_batch`, `triton_context`.

An undecorated callable takes a list of requests (mappings of input name to array) and returns a
list of dicts, one per request. `@batch` turns that into one call on the concatenated inputs as
keyword arguments, returning one dict of batched outputs that it splits back per request.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any, Callable, Dict, List

import numpy as np

from tessera.pytriton.exceptions import PyTritonBadParameterError, PyTritonValidationError
from tessera.pytriton.proxy_types import Request


@dataclasses.dataclass
class TritonContext:
    """What `@triton_context` passes as `triton_context`: `model_config` describes the bound model
    (`.inputs`, `.outputs`, `.config`)."""

    model_config: Any

    @property
    def output_names(self) -> List[str]:
        names = self.__dict__.get("_output_names")
        if names is None:
            names = self.__dict__["_output_names"] = [t.name for t in self.model_config.outputs]
        return names


def _set_context(func: Callable, context: TritonContext) -> None:
    f: Any = func
    while f is not None:
        try:
            f.__triton_context__ = context
        except (AttributeError, TypeError):
            pass
        f = getattr(f, "__wrapped__", None)


def _context_of(func: Callable) -> TritonContext | None:
    return getattr(func, "__triton_context__", None)


def triton_context(wrapped: Callable) -> Callable:
    """Passes `triton_context=TritonContext(...)` to the callable."""
    @functools.wraps(wrapped)
    def wrapper(*args, **kwargs):
        return wrapped(*args, triton_context=_context_of(wrapper), **kwargs)
    return wrapper


def _output_names(func: Callable) -> List[str] | None:
    ctx = _context_of(func)
    return ctx.output_names if ctx else None


def _outputs_dict(outputs: Any, wrapper: Callable) -> Dict[str, Any]:
    if isinstance(outputs, dict):
        return outputs
    if isinstance(outputs, (list, tuple)):
        out_names = _output_names(wrapper)
        if out_names is None or len(out_names) != len(outputs):
            raise PyTritonValidationError("outputs returned as a list need the bound model's output names")
        return dict(zip(out_names, outputs))
    raise PyTritonValidationError(f"@batch callable must return a dict of arrays, got {type(outputs)}")


def _rows_error(name: str, value: np.ndarray, total: int) -> PyTritonValidationError:
    return PyTritonValidationError(f"output {name} has {value.shape[0] if value.ndim else 0} rows for a batch of {total}")


def batch(wrapped: Callable) -> Callable:
    """Concatenates the requests' inputs along the batch axis and calls `wrapped(**inputs)` once;
    splits its outputs (a dict, or a list/tuple in the config's output order) back per request."""
    @functools.wraps(wrapped)
    def wrapper(requests: List[Request], *args, **kwargs):
        if len(requests) == 1:
            # The common case at low load: no concatenation, no split.
            data = requests[0].data
            outputs = _outputs_dict(wrapped(*args, **data, **kwargs), wrapper)
            total = len(next(iter(data.values()))) if data else 1
            result = {}
            for name, value in outputs.items():
                value = np.asarray(value)
                if value.ndim == 0 or value.shape[0] != total:
                    raise _rows_error(name, value, total)
                result[name] = value
            return [result]
        if not requests:
            return []
        names = list(requests[0].keys())
        for r in requests:
            if r.keys() != requests[0].keys():
                raise PyTritonValidationError(
                    "requests in one batch have different inputs; use @group_by_keys before @batch")
        inputs = {n: np.concatenate([r[n] for r in requests]) for n in names}
        outputs = _outputs_dict(wrapped(*args, **inputs, **kwargs), wrapper)
        sizes = [len(r[names[0]]) if names else 1 for r in requests]
        bounds = list(itertools.accumulate(sizes))
        total = bounds[-1]
        results: List[Dict[str, np.ndarray]] = [{} for _ in requests]
        for name, value in outputs.items():
            value = np.asarray(value)
            if value.ndim == 0 or value.shape[0] != total:
                raise _rows_error(name, value, total)
            for i, (start, end) in enumerate(zip([0] + bounds[:-1], bounds)):
                results[i][name] = value[start:end]
        return results
    # Lets the server call `wrapped` on inputs it concatenated itself (see _BoundModel.execute_batched).
    # The wrapper is part of the mark: a decorator applied over this one copies the wrapper's
    # __dict__ (functools.wraps) but is not the wrapper, so it keeps the general path.
    wrapper.__tessera_batch__ = (wrapper, wrapped)
    return wrapper


def batch_inner(func: Callable) -> Callable | None:
    """The function `@batch` wraps, when `func` is that decorator's wrapper itself."""
    mark = getattr(func, "__tessera_batch__", None)
    return mark[1] if mark is not None and mark[0] is func else None


def sample(wrapped: Callable) -> Callable:
    """Calls `wrapped(**request)` once per request (no batch axis handling)."""
    @functools.wraps(wrapped)
    def wrapper(requests: List[Request], *args, **kwargs):
        return [wrapped(*args, **dict(r), **kwargs) for r in requests]
    return wrapper


def group_by_keys(wrapped: Callable) -> Callable:
    """Calls `wrapped` once per group of requests that have the same set of inputs."""
    @functools.wraps(wrapped)
    def wrapper(requests: List[Request], *args, **kwargs):
        groups: Dict[tuple, List[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(tuple(sorted(r.keys())), []).append(i)
        results: List[Any] = [None] * len(requests)
        for indices in groups.values():
            out = wrapped([requests[i] for i in indices], *args, **kwargs)
            for i, o in zip(indices, out):
                results[i] = o
        return results
    return wrapper


def group_by_values(*keys: str, pad_fn: Callable | None = None) -> Callable:
    """Splits the requests' rows into groups with equal values of `keys` and calls `wrapped` once
    per group (each group a list of requests holding only that group's rows); reassembles the
    outputs in the original row order."""
    if not keys:
        raise PyTritonBadParameterError("group_by_values needs at least one input name")

    def decorator(wrapped: Callable) -> Callable:
        @functools.wraps(wrapped)
        def wrapper(requests: List[Request], *args, **kwargs):
            groups: Dict[tuple, List[tuple]] = {}
            for ri, r in enumerate(requests):
                rows = len(next(iter(r.values())))
                for row in range(rows):
                    key = tuple(np.asarray(r[k][row]).tobytes() if k in r else None for k in keys)
                    groups.setdefault(key, []).append((ri, row))
            per_request: List[Dict[int, Dict[str, np.ndarray]]] = [dict() for _ in requests]
            for members in groups.values():
                by_request: Dict[int, List[int]] = {}
                for ri, row in members:
                    by_request.setdefault(ri, []).append(row)
                sub = [Request({n: v[rows] for n, v in requests[ri].items()}, requests[ri].parameters,
                               requests[ri].requested_output_names) for ri, rows in by_request.items()]
                out = wrapped(sub, *args, **kwargs)
                for (ri, rows), o in zip(by_request.items(), out):
                    for name, value in o.items():
                        for k, row in enumerate(rows):
                            per_request[ri].setdefault(row, {})[name] = np.asarray(value)[k]
            results = []
            for rows in per_request:
                names = next(iter(rows.values())).keys() if rows else []
                results.append({n: np.stack([rows[i][n] for i in sorted(rows)]) for n in names})
            return results
        return wrapper
    return decorator


def fill_optionals(**defaults: Any) -> Callable:
    """Fills inputs a request lacks with `defaults[name]`, repeated along the request's batch axis."""
    def decorator(wrapped: Callable) -> Callable:
        @functools.wraps(wrapped)
        def wrapper(requests: List[Request], *args, **kwargs):
            for r in requests:
                rows = len(next(iter(r.values()))) if len(r) else 1
                for name, default in defaults.items():
                    if name not in r:
                        value = np.asarray(default)
                        r[name] = np.repeat(value[np.newaxis, ...], rows, axis=0)
            return wrapped(requests, *args, **kwargs)
        return wrapper
    return decorator


def first_value(*keys: str, squeeze_single_values: bool = True, strict: bool = True) -> Callable:
    """For batched keyword inputs (under `@batch`): replaces each of `keys` with its first row
    (a scalar when that row holds one value); with `strict`, all rows must be equal."""
    def decorator(wrapped: Callable) -> Callable:
        @functools.wraps(wrapped)
        def wrapper(*args, **inputs):
            for key in keys:
                if key not in inputs:
                    continue
                value = np.asarray(inputs[key])
                if strict and value.shape[0] > 1 and not (value == value[0]).all():
                    raise PyTritonValidationError(f"the rows of {key} are not all equal; first_value needs them equal")
                first = value[0]
                if squeeze_single_values and np.size(first) == 1:
                    first = first.reshape(()).item() if first.dtype.kind != "O" else first.reshape(-1)[0]
                inputs[key] = first
            return wrapped(*args, **inputs)
        return wrapper
    return decorator


def pad_batch(wrapped: Callable) -> Callable:
    """For batched keyword inputs (under `@batch`): repeats the last row up to the model's
    max_batch_size and trims the outputs back."""
    @functools.wraps(wrapped)
    def wrapper(*args, **inputs):
        ctx = _context_of(wrapper)
        target = ctx.model_config.config.max_batch_size if ctx else None
        rows = len(next(iter(inputs.values()))) if inputs else 0
        if not target or rows >= target:
            return wrapped(*args, **inputs)
        padded = {k: np.concatenate([v, np.repeat(v[-1:], target - rows, axis=0)]) for k, v in inputs.items()}
        outputs = wrapped(*args, **padded)
        return {k: np.asarray(v)[:rows] for k, v in outputs.items()}
    return wrapper
