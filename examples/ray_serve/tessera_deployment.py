"""Tessera under Ray Serve: each replica runs a Tessera server in-process and answers through it.

A Ray Serve deployment whose replicas each start Tessera inside their own worker process with
`tessera.tritonserver` (the API of Triton's `tritonserver` Python module): no server binary, no
port of its own, no second hop. Ray Serve's HTTP proxy takes the request, picks a replica, and the
replica hands the tensors to its in-process server:

    client --HTTP--> Ray Serve proxy --actor call--> replica: tritonserver.Server (in-process)

Request (HTTP POST to the route, JSON):   {"INPUT0": [16 floats], "INPUT1": [16 floats]}
Answer:  {"OUTPUT0": [...], "OUTPUT1": [...],     # INPUT0 + INPUT1, INPUT0 - INPUT1 (add_sub)
          "node": "<Ray node id>", "replica": "<Serve replica id>", "pid": <replica process id>}
A batch is accepted too: [[16 floats], ...] (up to add_sub's max_batch_size, 8) answers in the
same shape.

Placement: two replicas, at most one per node (`max_replicas_per_node=1`), so a two-node cluster
gets one on each; if one dies, Ray Serve starts its replacement where there is room (the node that
lost it). Each replica asks for half a CPU. Tessera's runtime starts a worker thread per core of
the node whatever Ray grants: on a big node, cap it with `TOKIO_WORKER_THREADS` in the replica's
`runtime_env={"env_vars": {...}}` (docs/tritonserver.md, "Threads").

Run it (a cluster started with `ray start`, the `tessera` package installed on every node, and the
model repository at the same path on every node):

    cd examples/ray_serve
    TESSERA_MODEL_REPOSITORY=/path/to/model-repos/quickstart serve run tessera_deployment:app
    curl -s -X POST localhost:8000/ -d '{"INPUT0": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],
                                        "INPUT1": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}'

or from Python, as tests/test_ray_serve.py does:

    from ray import serve
    import tessera_deployment
    serve.run(tessera_deployment.TesseraAddSub.bind(model_repository="/abs/path/quickstart"),
              route_prefix="/add_sub")

Ray Serve's proxy prefers replicas on its own node; with one proxy per node (the default) that
is what a real cluster wants. tests/test_ray_serve.py runs a single proxy (two nodes on one machine
cannot both bind one port) and turns that preference off
(RAY_SERVE_PROXY_PREFER_LOCAL_NODE_ROUTING=0 in the nodes' environment) so that both replicas
take traffic.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse

# The repository served when none is given to bind(): $TESSERA_MODEL_REPOSITORY, else this
# checkout's quickstart repository (add_sub is an ONNX model there).
DEFAULT_REPOSITORY = os.environ.get(
    "TESSERA_MODEL_REPOSITORY",
    str(Path(__file__).resolve().parent.parent.parent / "model-repos" / "quickstart"),
)


@serve.deployment(
    num_replicas=2,
    max_replicas_per_node=1,
    ray_actor_options={"num_cpus": 0.5},
    # Tessera queues and batches requests itself (add_sub has a dynamic batcher); let a replica
    # take several at once so that they can meet there.
    max_ongoing_requests=16,
    # The replica's start includes the server's: loading the model (ONNX Runtime session).
    health_check_period_s=5,
    graceful_shutdown_timeout_s=10,
)
class TesseraAddSub:
    def __init__(self, model_repository: str = DEFAULT_REPOSITORY, model_name: str = "add_sub"):
        # Imported here, in the replica: the driver that deploys this (and Serve's controller)
        # does not need Tessera's native module, only the nodes that run replicas do.
        from tessera import tritonserver

        self.model_name = model_name
        self.server = tritonserver.Server(
            model_repository=model_repository,
            model_control_mode=tritonserver.ModelControlMode.EXPLICIT,
            log_info=False,
        )
        self.server.start(wait_until_ready=True)
        self.server.load(model_name)
        self.model = self.server.model(model_name)

        context = ray.get_runtime_context()
        self.node = context.get_node_id()
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.pid = os.getpid()

    async def infer(self, input0: np.ndarray, input1: np.ndarray) -> dict[str, np.ndarray]:
        """One inference through the in-process server. `async_infer` hands the response to this
        replica's event loop when it is ready: no thread is held while the model runs."""
        outputs = {}
        async for response in self.model.async_infer(inputs={"INPUT0": input0, "INPUT1": input1}):
            for name in ("OUTPUT0", "OUTPUT1"):
                if name in response.outputs:
                    outputs[name] = response.outputs[name].to_numpy()
        return outputs

    async def __call__(self, request: Request) -> JSONResponse:
        try:
            body = await request.json()
            input0 = np.asarray(body["INPUT0"], dtype=np.float32)
            input1 = np.asarray(body["INPUT1"], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as e:
            return JSONResponse({"error": f"expected JSON {{'INPUT0': [...], 'INPUT1': [...]}}: {e}"},
                                status_code=400)
        shape = input0.shape
        if input0.ndim == 1:  # add_sub takes [batch, 16]
            input0, input1 = input0[None, :], input1[None, :]
        try:
            outputs = await self.infer(input0, input1)
        except Exception as e:  # the server's error, passed on with its type and message
            return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=500)
        return JSONResponse({
            "OUTPUT0": outputs["OUTPUT0"].reshape(shape).tolist(),
            "OUTPUT1": outputs["OUTPUT1"].reshape(shape).tolist(),
            "node": self.node,
            "replica": self.replica,
            "pid": self.pid,
        })

    def __del__(self):
        # Serve calls this when it stops the replica (scale-down, redeploy, serve.shutdown()).
        server, self.server = getattr(self, "server", None), None
        if server is not None:
            try:
                server.stop()
            except Exception:  # noqa: BLE001 - already stopped, or the interpreter is going away
                pass


app = TesseraAddSub.bind()
