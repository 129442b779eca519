"""PyTriton's clients (ModelClient, FuturesModelClient, AsyncioModelClient, DecoupledModelClient)
over tritonclient. They talk to any Triton-protocol server (Tessera, Triton)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import time
from typing import Any, Dict, Iterator, Optional, Tuple
from urllib.parse import urlparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tessera.pytriton.exceptions import (
    PyTritonClientInferenceServerError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)

DEFAULT_INIT_TIMEOUT_S = 300.0


def _parse_url(url: str) -> Tuple[str, str]:
    """(scheme, host:port) with PyTriton's defaults: http on 8000, grpc on 8001."""
    if "://" not in url:
        url = f"http://{url}"
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    if scheme not in ("http", "grpc"):
        raise PyTritonClientValueError(f"unsupported protocol {scheme!r} in {url!r} (use http or grpc)")
    port = parsed.port or (8001 if scheme == "grpc" else 8000)
    return scheme, f"{parsed.hostname or 'localhost'}:{port}"


def _datatype(value: np.ndarray) -> str:
    if value.dtype.kind in ("O", "S", "U"):
        return "BYTES"
    return np_to_triton_dtype(value.dtype)


class ModelClient:
    """Synchronous client: `infer_sample` (one sample, no batch axis) and `infer_batch`."""

    def __init__(self, url: str, model_name: str, model_version: Optional[str] = None, *, lazy_init: bool = True,
                 init_timeout_s: Optional[float] = None, inference_timeout_s: Optional[float] = None,
                 model_config: Any = None, ensure_model_is_ready: bool = True):
        self._scheme, self._address = _parse_url(url)
        self._model_name = model_name
        self._model_version = "" if model_version is None else str(model_version)
        self._init_timeout_s = init_timeout_s or DEFAULT_INIT_TIMEOUT_S
        self._inference_timeout_s = inference_timeout_s
        self._lib = grpcclient if self._scheme == "grpc" else httpclient
        kwargs = {} if self._scheme == "grpc" else {"network_timeout": inference_timeout_s or 60.0,
                                                     "connection_timeout": inference_timeout_s or 60.0}
        self._client = self._lib.InferenceServerClient(self._address, **kwargs)
        self._metadata: Optional[dict] = None
        self._config: Optional[dict] = None
        if not lazy_init:
            self.wait_for_model(self._init_timeout_s)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._client.close()

    def wait_for_model(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._client.is_model_ready(self._model_name, self._model_version):
                    self._load_config()
                    return
            except InferenceServerException:
                pass
            except Exception:  # noqa: BLE001 - connection refused while the server starts
                pass
            if time.monotonic() >= deadline:
                raise PyTritonClientTimeoutError(f"model {self._model_name} not ready within {timeout_s} s")
            time.sleep(0.05)

    def _load_config(self) -> None:
        if self._config is not None:
            return
        kw = {"as_json": True} if self._scheme == "grpc" else {}
        try:
            self._metadata = self._client.get_model_metadata(self._model_name, self._model_version, **kw)
            config = self._client.get_model_config(self._model_name, self._model_version, **kw)
        except InferenceServerException as e:
            raise PyTritonClientModelUnavailableError(f"model {self._model_name}: {e.message()}") from e
        self._config = config.get("config", config)

    @property
    def model_config(self) -> dict:
        self.wait_for_model(self._init_timeout_s)
        assert self._config is not None
        return self._config

    def _named(self, inputs: tuple, named: dict) -> Dict[str, np.ndarray]:
        if inputs and named:
            raise PyTritonClientValueError("pass inputs either positionally or by name, not both")
        if inputs:
            names = [i["name"] for i in self.model_config["input"]]
            if len(inputs) > len(names):
                raise PyTritonClientValueError(f"{len(inputs)} inputs given, the model takes {len(names)}")
            named = dict(zip(names, inputs))
        return {k: np.asarray(v) for k, v in named.items()}

    def _request(self, named: Dict[str, np.ndarray], parameters: Optional[dict]):
        lib = self._lib
        inputs = []
        for name, value in named.items():
            i = lib.InferInput(name, list(value.shape), _datatype(value))
            if value.dtype.kind == "U":
                value = np.char.encode(value, "utf-8")
            i.set_data_from_numpy(value)
            inputs.append(i)
        outputs = [lib.InferRequestedOutput(o["name"]) for o in self.model_config["output"]]
        return inputs, outputs, parameters

    def _decode(self, result) -> Dict[str, np.ndarray]:
        return {o["name"]: result.as_numpy(o["name"]) for o in self.model_config["output"]}

    def _infer(self, named: Dict[str, np.ndarray], parameters: Optional[dict],
               headers: Optional[dict] = None) -> Dict[str, np.ndarray]:
        inputs, outputs, parameters = self._request(named, parameters)
        kwargs: dict = {"outputs": outputs, "model_version": self._model_version}
        if parameters:
            kwargs["parameters"] = parameters
        if headers:
            kwargs["headers"] = headers
        if self._scheme == "grpc" and self._inference_timeout_s:
            kwargs["client_timeout"] = self._inference_timeout_s
        try:
            result = self._client.infer(self._model_name, inputs, **kwargs)
        except InferenceServerException as e:
            raise PyTritonClientInferenceServerError(e.message()) from e
        return self._decode(result)

    def _batches(self) -> bool:
        return int(self.model_config.get("max_batch_size", 0)) > 0

    def infer_sample(self, *inputs, parameters: Optional[dict] = None, headers: Optional[dict] = None,
                     **named_inputs) -> Dict[str, np.ndarray]:
        named = self._named(inputs, named_inputs)
        if self._batches():
            named = {k: v[np.newaxis, ...] for k, v in named.items()}
            return {k: v[0] for k, v in self._infer(named, parameters, headers).items()}
        return self._infer(named, parameters, headers)

    def infer_batch(self, *inputs, parameters: Optional[dict] = None, headers: Optional[dict] = None,
                    **named_inputs) -> Dict[str, np.ndarray]:
        if not self._batches():
            raise PyTritonClientValueError(f"model {self._model_name} does not batch: use infer_sample")
        return self._infer(self._named(inputs, named_inputs), parameters, headers)


class FuturesModelClient:
    """ModelClient calls on a thread pool: `infer_sample`/`infer_batch` return futures."""

    def __init__(self, url: str, model_name: str, model_version: Optional[str] = None, *,
                 max_workers: Optional[int] = None, init_timeout_s: Optional[float] = None,
                 inference_timeout_s: Optional[float] = None, **_ignored):
        self._args = (url, model_name, model_version)
        self._kwargs = {"init_timeout_s": init_timeout_s, "inference_timeout_s": inference_timeout_s}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers or 4)
        self._clients: "queue.SimpleQueue[ModelClient]" = queue.SimpleQueue()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method: str, *args, **kwargs):
        try:
            client = self._clients.get_nowait()
        except queue.Empty:
            client = ModelClient(*self._args, **self._kwargs)
        try:
            return getattr(client, method)(*args, **kwargs)
        finally:
            self._clients.put(client)

    def infer_sample(self, *inputs, **kwargs) -> concurrent.futures.Future:
        return self._pool.submit(self._call, "infer_sample", *inputs, **kwargs)

    def infer_batch(self, *inputs, **kwargs) -> concurrent.futures.Future:
        return self._pool.submit(self._call, "infer_batch", *inputs, **kwargs)

    def model_config(self) -> concurrent.futures.Future:
        return self._pool.submit(lambda: self._call("__getattribute__", "model_config"))

    def close(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait)
        while True:
            try:
                self._clients.get_nowait().close()
            except queue.Empty:
                break


class AsyncioModelClient:
    """`await client.infer_sample(...)` / `infer_batch(...)`, run on a worker thread so the event
    loop is never blocked."""

    def __init__(self, url: str, model_name: str, model_version: Optional[str] = None, **kwargs):
        self._client = ModelClient(url, model_name, model_version, **kwargs)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def infer_sample(self, *inputs, **kwargs) -> Dict[str, np.ndarray]:
        return await asyncio.to_thread(self._client.infer_sample, *inputs, **kwargs)

    async def infer_batch(self, *inputs, **kwargs) -> Dict[str, np.ndarray]:
        return await asyncio.to_thread(self._client.infer_batch, *inputs, **kwargs)

    @property
    async def model_config(self) -> dict:
        return await asyncio.to_thread(lambda: self._client.model_config)

    async def close(self) -> None:
        await asyncio.to_thread(self._client.close)


class DecoupledModelClient(ModelClient):
    """For decoupled models over gRPC streaming: `infer_sample` / `infer_batch` yield one dict per
    response."""

    def __init__(self, url: str, model_name: str, model_version: Optional[str] = None, **kwargs):
        scheme, _ = _parse_url(url)
        if scheme != "grpc":
            raise PyTritonClientValueError("DecoupledModelClient needs a grpc:// url")
        super().__init__(url, model_name, model_version, **kwargs)

    def _stream(self, named: Dict[str, np.ndarray], parameters: Optional[dict],
                headers: Optional[dict] = None) -> Iterator[Dict[str, np.ndarray]]:
        inputs, outputs, parameters = self._request(named, parameters)
        responses: "queue.Queue[Any]" = queue.Queue()
        self._client.start_stream(callback=lambda result, error: responses.put(error or result), headers=headers)
        try:
            kwargs: dict = {"outputs": outputs, "enable_empty_final_response": True}
            if parameters:
                kwargs["parameters"] = parameters
            self._client.async_stream_infer(self._model_name, inputs, **kwargs)
            while True:
                item = responses.get(timeout=self._inference_timeout_s or 60.0)
                if isinstance(item, InferenceServerException):
                    raise PyTritonClientInferenceServerError(item.message())
                response = item.get_response()
                final = response.parameters.get("triton_final_response")
                if response.outputs:
                    yield self._decode(item)
                if final is not None and final.bool_param:
                    return
        finally:
            self._client.stop_stream()

    def infer_sample(self, *inputs, parameters: Optional[dict] = None, headers: Optional[dict] = None,
                     **named_inputs):
        named = self._named(inputs, named_inputs)
        if self._batches():
            named = {k: v[np.newaxis, ...] for k, v in named.items()}
            return ({k: v[0] for k, v in r.items()} for r in self._stream(named, parameters, headers))
        return self._stream(named, parameters, headers)

    def infer_batch(self, *inputs, parameters: Optional[dict] = None, headers: Optional[dict] = None,
                    **named_inputs):
        return self._stream(self._named(inputs, named_inputs), parameters, headers)
