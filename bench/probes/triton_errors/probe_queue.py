import sys, json, threading, http.client, struct, time
import grpc
from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc as pbg
hp, gp = int(sys.argv[1]), int(sys.argv[2])
body = json.dumps({"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[1]*16},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1]*16}]}).encode()
res = []
def h(i, with_id=False):
    b = body if not with_id else json.dumps(dict(json.loads(body), id="q%d" % i)).encode()
    c = http.client.HTTPConnection("127.0.0.1", hp, timeout=30); c.request("POST", "/v2/models/simple_q/infer", body=b); r = c.getresponse(); res.append(("http", i, r.status, r.getheader("Content-Type"), r.read().decode()[:120]))
def g(i):
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{gp}"))
    r = pb.ModelInferRequest(model_name="simple_q", id="g%d" % i)
    for n in ("INPUT0", "INPUT1"):
        r.inputs.add(name=n, datatype="INT32", shape=[1, 16])
        r.raw_input_contents.append(struct.pack("<16i", *[1]*16))
    try:
        stub.ModelInfer(r, timeout=30); res.append(("grpc", i, "OK", ""))
    except grpc.RpcError as e:
        res.append(("grpc", i, e.code().name, e.details()))
ts = [threading.Thread(target=h, args=(0,))] + [threading.Thread(target=h, args=(1, True))] + [threading.Thread(target=h, args=(2,))] + [threading.Thread(target=g, args=(3,))]
for t in ts: t.start(); time.sleep(0.2)
for t in ts: t.join()
for r in sorted(res, key=lambda r: r[1]): print(r)
