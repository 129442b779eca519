"""contract_packages: the packages a Triton python environment usually has, used as models use
them. requests is imported inside a try: a Triton whose environment lacks it still loads the
model, and the case reports that instead."""

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import threading
import typing

import numpy as np
import triton_python_backend_utils as pb_utils

try:
    import requests
except ImportError as e:  # reported by OP "http" / "stdlib"
    requests = None
    REQUESTS_ERROR = str(e)
else:
    REQUESTS_ERROR = None

LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class Point:
    x: int
    y: typing.Optional[int] = None


def _out(obj):
    blob = np.array([json.dumps(obj, sort_keys=True).encode()], dtype=np.object_)
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", blob)])


def _text(request, name):
    t = pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return None
    v = t.as_numpy().reshape(-1)[0]
    return v.decode() if isinstance(v, bytes) else str(v)


async def _twice(x):
    await asyncio.sleep(0)
    return 2 * x


async def _gather():
    return await asyncio.gather(*[_twice(i) for i in range(4)])


def _stdlib():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(threading.current_thread().name), name="worker")
    thread.start()
    thread.join()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        squares = list(pool.map(lambda v: v * v, range(5)))
        future = pool.submit(sum, [1, 2, 3])
        total = future.result(timeout=30)
    lock = threading.Lock()
    with lock:
        locked = lock.locked()
    LOG.setLevel(logging.INFO)
    LOG.info("contract_packages: logging works")
    hints = typing.get_type_hints(Point)
    return {
        "json": json.loads(json.dumps({"a": [1, 2.5, None]})),
        "asyncio": asyncio.run(_gather()),
        "thread": seen,
        "futures": {"map": squares, "submit": total},
        "lock": locked,
        "logging": LOG.getEffectiveLevel() == logging.INFO,
        "dataclasses": dataclasses.asdict(Point(1)),
        "typing": sorted(hints),
        "requests": None if requests is None else requests.__version__,
        "requests_error": REQUESTS_ERROR,
    }


class TritonPythonModel:
    def execute(self, requests_):
        responses = []
        for request in requests_:
            op = _text(request, "OP")
            if op == "stdlib":
                responses.append(_out(_stdlib()))
            elif op == "http":
                responses.append(_out(_http(_text(request, "ARG"))))
            else:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("unknown OP %r" % op, pb_utils.TritonError.INVALID_ARG)))
        return responses


def _http(url):
    if requests is None:
        return {"error": "ImportError", "message": REQUESTS_ERROR}
    try:
        r = requests.get(url, timeout=10)
        return {"status": r.status_code}
    except requests.exceptions.RequestException as e:
        return {"error": type(e).__name__, "message": str(e),
                "is_connection_error": isinstance(e, requests.exceptions.ConnectionError)}
