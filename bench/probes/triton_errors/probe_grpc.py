import json, sys, struct
import grpc
from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc as pbg

PORT = int(sys.argv[1])
ch = grpc.insecure_channel(f"127.0.0.1:{PORT}")
stub = pbg.GRPCInferenceServiceStub(ch)

for name, size in [("tcat_a", 64), ("tcat_b", 128)]:
    with open("/dev/shm/" + name, "wb") as f:
        f.truncate(size)

def raw16(v=1):
    return struct.pack("<16i", *([v] * 16))

def T(name, shape, dt="INT32", params=None, contents=None):
    t = pb.ModelInferRequest().InferInputTensor(name=name, datatype=dt, shape=list(shape))
    if params:
        for k, v in params.items():
            setp(t.parameters[k], v)
    if contents:
        for k, v in contents.items():
            getattr(t.contents, k).extend(v)
    return t

def setp(p, v):
    kind, val = v
    setattr(p, kind, val)

def R(model="simple", version="", inputs=None, raw=None, outputs=None, params=None, id=""):
    r = pb.ModelInferRequest(model_name=model, model_version=version, id=id)
    if inputs is None:
        inputs = [T("INPUT0", (1, 16)), T("INPUT1", (1, 16))]
        raw = [raw16(), raw16()] if raw is None else raw
    r.inputs.extend(inputs)
    if raw:
        r.raw_input_contents.extend(raw)
    for o in outputs or []:
        if isinstance(o, str):
            r.outputs.add(name=o)
        else:
            oo = r.outputs.add(name=o[0])
            for k, v in o[1].items():
                setp(oo.parameters[k], v)
    for k, v in (params or {}).items():
        setp(r.parameters[k], v)
    return r

cases = []
def add(name, fn, req):
    cases.append((name, fn, req))
I = stub.ModelInfer
add("version_abc", I, R(version="abc"))
add("version_neg", I, R(version="-1"))
add("version_huge", I, R(version="99999999999999999999"))
add("version_1abc", I, R(version="1abc"))
add("version_space1", I, R(version=" 1"))
add("version_9", I, R(version="9"))
add("unknown_model", I, R(model="nope"))
add("dup_outputs", I, R(outputs=["OUTPUT0", "OUTPUT0"]))
add("unknown_output", I, R(outputs=["NOPE"]))
add("missing_input", I, R(inputs=[T("INPUT0", (1, 16))], raw=[raw16()]))
add("unknown_input_same_count", I, R(inputs=[T("INPUT0", (1, 16)), T("BOGUS", (1, 16))], raw=[raw16(), raw16()]))
add("dup_input", I, R(inputs=[T("INPUT0", (1, 16)), T("INPUT0", (1, 16)), T("INPUT1", (1, 16))], raw=[raw16()] * 3))
add("wrong_dtype", I, R(inputs=[T("INPUT0", (1, 16), "FP32"), T("INPUT1", (1, 16))], raw=[raw16(), raw16()]))
add("invalid_dtype", I, R(inputs=[T("INPUT0", (1, 16), "FLOAT"), T("INPUT1", (1, 16))], raw=[raw16(), raw16()]))
add("wrong_shape", I, R(inputs=[T("INPUT0", (1, 15)), T("INPUT1", (1, 16))], raw=[raw16()[:60], raw16()]))
add("batch_too_big", I, R(inputs=[T("INPUT0", (9, 16)), T("INPUT1", (9, 16))], raw=[raw16() * 9, raw16() * 9]))
add("byte_size_mismatch", I, R(raw=[raw16()[:60], raw16()]))
add("raw_missing", I, R(raw=[raw16()]))
add("raw_extra", I, R(raw=[raw16(), raw16(), raw16()]))
add("contents_and_raw", I, R(inputs=[T("INPUT0", (1, 16), contents={"int_contents": [1] * 16}), T("INPUT1", (1, 16))], raw=[raw16()]))
add("contents_wrong_type", I, R(inputs=[T("INPUT0", (1, 16), contents={"fp32_contents": [1.0] * 16}), T("INPUT1", (1, 16), contents={"int_contents": [1] * 16})], raw=[]))
add("contents_two_fields", I, R(inputs=[T("INPUT0", (1, 16), contents={"int_contents": [1] * 16, "int64_contents": [1] * 16}), T("INPUT1", (1, 16), contents={"int_contents": [1] * 16})], raw=[]))
add("contents_short", I, R(inputs=[T("INPUT0", (1, 16), contents={"int_contents": [1] * 15}), T("INPUT1", (1, 16), contents={"int_contents": [1] * 16})], raw=[]))
add("shape_negative_batch", I, R(inputs=[T("INPUT0", (-1, 16)), T("INPUT1", (-1, 16))], raw=[raw16(), raw16()]))
add("shape_negative_nonbatch", I, R(model="identity_fp32", inputs=[T("INPUT0", (-1,), "FP32")], raw=[b"\0" * 8]))
add("shape_neg2_nonbatch", I, R(model="identity_fp32", inputs=[T("INPUT0", (-2,), "FP32")], raw=[b"\0" * 8]))
add("shape_overflow_2dims", I, R(model="identity_fp32", inputs=[T("INPUT0", (4294967296, 4294967296), "FP32")], raw=[b""]))
add("shape_empty_batching", I, R(inputs=[T("INPUT0", ()), T("INPUT1", (1, 16))], raw=[b"", raw16()]))
add("shape_batch_trunc", I, R(inputs=[T("INPUT0", (4294967297, 16)), T("INPUT1", (4294967297, 16))], raw=[raw16(), raw16()]))
add("batch_mismatch", I, R(inputs=[T("INPUT0", (1, 16)), T("INPUT1", (2, 16))], raw=[raw16(), raw16() * 2]))
add("bytes_bad_element", I, R(model="identity_bytes", inputs=[T("INPUT0", (1,), "BYTES")], raw=[struct.pack("<I", 5) + b"a"]))
add("bytes_count", I, R(model="identity_bytes", inputs=[T("INPUT0", (2,), "BYTES")], raw=[struct.pack("<I", 1) + b"a"]))
add("bytes_extra", I, R(model="identity_bytes", inputs=[T("INPUT0", (1,), "BYTES")], raw=[struct.pack("<I", 1) + b"a" + struct.pack("<I", 1) + b"b"]))
# parameters
add("seqid_bool", I, R(params={"sequence_id": ("bool_param", True)}))
add("seqid_uint64", I, R(params={"sequence_id": ("uint64_param", 5)}))
add("seqstart_int", I, R(params={"sequence_start": ("int64_param", 1)}))
add("seqend_str", I, R(params={"sequence_end": ("string_param", "true")}))
add("priority_neg", I, R(params={"priority": ("int64_param", -1)}))
add("priority_str", I, R(params={"priority": ("string_param", "1")}))
add("priority_bool", I, R(params={"priority": ("bool_param", True)}))
add("timeout_str", I, R(params={"timeout": ("string_param", "1")}))
add("timeout_uint", I, R(params={"timeout": ("uint64_param", 1)}))
add("triton_reserved", I, R(params={"triton_foo": ("bool_param", True)}))
add("triton_empty_final_wrongtype", I, R(params={"triton_enable_empty_final_response": ("int64_param", 1)}))
add("custom_uint64", I, R(params={"foo": ("uint64_param", 1)}))
add("custom_double", I, R(params={"foo": ("double_param", 1.5)}))
add("custom_unset", I, R(params={}))
r = R(); r.parameters["foo"].SetInParent()
cases[-1] = ("custom_unset", I, r)
add("classification_str", I, R(outputs=[("OUTPUT0", {"classification": ("string_param", "2")})]))
add("classification_zero", I, R(outputs=[("OUTPUT0", {"classification": ("int64_param", 0)})]))
add("classification_and_shm", I, R(outputs=[("OUTPUT0", {"classification": ("int64_param", 2), "shared_memory_region": ("string_param", "rb"), "shared_memory_byte_size": ("int64_param", 64)})]))
add("classification_bytes_output_SKIP", None, None)
# sequence
SQ = lambda params, shape=(1, 1): R(model="simple_sequence", inputs=[T("INPUT", shape)], raw=[struct.pack("<%di" % (shape[0]), *([1] * shape[0]))], params=params)
add("seq_no_id", I, SQ({}))
add("seq_no_start", I, SQ({"sequence_id": ("int64_param", 777)}))
add("seq_no_start_str", I, SQ({"sequence_id": ("string_param", "abc")}))
add("seq_id_neg", I, SQ({"sequence_id": ("int64_param", -5), "sequence_start": ("bool_param", True)}))
add("seq_batch2", I, SQ({"sequence_id": ("int64_param", 778), "sequence_start": ("bool_param", True)}, (2, 1)))
add("seq_id_long", I, SQ({"sequence_id": ("string_param", "x" * 129), "sequence_start": ("bool_param", True)}))
# shm
SR = stub.SystemSharedMemoryRegister
add("shm_reg_ok_b", SR, pb.SystemSharedMemoryRegisterRequest(name="rb", key="/tcat_b", offset=0, byte_size=128))
add("shm_reg_dup_name", SR, pb.SystemSharedMemoryRegisterRequest(name="rb", key="/tcat_b", offset=0, byte_size=128))
add("shm_reg_same_key", SR, pb.SystemSharedMemoryRegisterRequest(name="rb2", key="/tcat_b", offset=0, byte_size=64))
add("shm_reg_bad_key", SR, pb.SystemSharedMemoryRegisterRequest(name="r1", key="/does_not_exist_tcat", offset=0, byte_size=64))
add("shm_reg_too_big", SR, pb.SystemSharedMemoryRegisterRequest(name="r2", key="/tcat_a", offset=0, byte_size=65))
add("shm_reg_overflow", SR, pb.SystemSharedMemoryRegisterRequest(name="r3", key="/tcat_a", offset=18446744073709551615, byte_size=2))
add("shm_reg_empty_name", SR, pb.SystemSharedMemoryRegisterRequest(name="", key="/tcat_a", offset=0, byte_size=64))
add("shm_status_unknown", stub.SystemSharedMemoryStatus, pb.SystemSharedMemoryStatusRequest(name="nope"))
add("shm_unreg_unknown", stub.SystemSharedMemoryUnregister, pb.SystemSharedMemoryUnregisterRequest(name="nope"))
add("cuda_status_sysregion", stub.CudaSharedMemoryStatus, pb.CudaSharedMemoryStatusRequest(name="rb"))
def SHM(region, off, size, extra=None):
    p = {"shared_memory_region": ("string_param", region), "shared_memory_byte_size": ("int64_param", size)}
    if off is not None:
        p["shared_memory_offset"] = ("int64_param", off)
    p.update(extra or {})
    return R(inputs=[T("INPUT0", (1, 16), params=p), T("INPUT1", (1, 16))], raw=[raw16()])
add("infer_shm_unknown_region", I, SHM("nope", 0, 64))
add("infer_shm_offset_beyond", I, SHM("rb", 200, 64))
add("infer_shm_offset_eq_size", I, SHM("rb", 128, 0))
add("infer_shm_range_over", I, SHM("rb", 100, 64))
add("infer_shm_size_zero", I, SHM("rb", 0, 0))
add("infer_shm_offset_neg", I, SHM("rb", -1, 64))
add("infer_shm_size_neg", I, SHM("rb", 0, -1))
add("infer_shm_size_wrong", I, SHM("rb", 0, 60))
add("infer_shm_ok", I, SHM("rb", 0, 64))
add("infer_shm_region_int", I, R(inputs=[T("INPUT0", (1, 16), params={"shared_memory_region": ("int64_param", 1), "shared_memory_byte_size": ("int64_param", 64)}), T("INPUT1", (1, 16))], raw=[raw16()]))
add("infer_shm_offset_str", I, SHM("rb", None, 64, {"shared_memory_offset": ("string_param", "0")}))
add("infer_shm_size_uint", I, R(inputs=[T("INPUT0", (1, 16), params={"shared_memory_region": ("string_param", "rb"), "shared_memory_byte_size": ("uint64_param", 64)}), T("INPUT1", (1, 16))], raw=[raw16()]))
add("infer_shm_no_size", I, R(inputs=[T("INPUT0", (1, 16), params={"shared_memory_region": ("string_param", "rb")}), T("INPUT1", (1, 16))], raw=[raw16()]))
add("infer_shm_offset_no_region", I, R(inputs=[T("INPUT0", (1, 16), params={"shared_memory_offset": ("int64_param", 0)}), T("INPUT1", (1, 16))], raw=[raw16(), raw16()]))
add("infer_shm_size_no_region", I, R(inputs=[T("INPUT0", (1, 16), params={"shared_memory_byte_size": ("int64_param", 64)}), T("INPUT1", (1, 16))], raw=[raw16(), raw16()]))
add("infer_shm_with_contents", I, R(inputs=[T("INPUT0", (1, 16), params={"shared_memory_region": ("string_param", "rb"), "shared_memory_byte_size": ("int64_param", 64)}, contents={"int_contents": [1] * 16}), T("INPUT1", (1, 16), contents={"int_contents": [1] * 16})], raw=[]))
add("infer_shm_out_small", I, R(outputs=[("OUTPUT0", {"shared_memory_region": ("string_param", "rb"), "shared_memory_byte_size": ("int64_param", 4)})]))
add("infer_shm_out_unknown", I, R(outputs=[("OUTPUT0", {"shared_memory_region": ("string_param", "nope"), "shared_memory_byte_size": ("int64_param", 64)})]))
add("shm_unreg_all", stub.SystemSharedMemoryUnregister, pb.SystemSharedMemoryUnregisterRequest(name=""))

out = {}
for name, fn, req in cases:
    if fn is None:
        continue
    try:
        resp = fn(req, timeout=30)
        if isinstance(resp, pb.ModelInferResponse):
            out[name] = ["OK", json.dumps([(o.name, list(o.shape)) for o in resp.outputs])]
        else:
            out[name] = ["OK", ""]
    except grpc.RpcError as e:
        out[name] = [e.code().name, e.details()]
json.dump(out, sys.stdout, indent=0)
