import http.client, json, sys, struct, os

PORT = int(sys.argv[1])

def rng(n, v=None):
    return list(range(1, n + 1)) if v is None else [v] * n

def inp(name="INPUT0", shape=(1, 16), dt="INT32", data="default", params=None):
    d = {"name": name, "shape": list(shape), "datatype": dt}
    if data == "default":
        n = 1
        for s in shape:
            n *= s
        d["data"] = rng(n)
    elif data is not None:
        d["data"] = data
    if params is not None:
        d["parameters"] = params
    return d

GOOD = [inp("INPUT0"), inp("INPUT1")]

def body(obj):
    return json.dumps(obj, separators=(",", ":")).encode()

def req(method, path, data=b"", headers=None):
    c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
    h = {"Content-Length": str(len(data))}
    if headers:
        h.update(headers)
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    b = r.read()
    c.close()
    return r.status, b.decode("latin1")

# shm files
for name, size in [("tcat_a", 64), ("tcat_b", 128), ("tcat_zero", 0)]:
    with open("/dev/shm/" + name, "wb") as f:
        f.truncate(size)

I = "/v2/models/simple/infer"
cases = []
def add(name, method, path, data=b"", headers=None):
    cases.append((name, method, path, data, headers))

def binreq(json_obj, blobs, hlen=None):
    j = body(json_obj)
    return j + b"".join(blobs), {"Inference-Header-Content-Length": str(len(j) if hlen is None else hlen)}

# --- versions / models
add("version_abc", "POST", "/v2/models/simple/versions/abc/infer", body({"inputs": GOOD}))
add("version_neg", "POST", "/v2/models/simple/versions/-1/infer", body({"inputs": GOOD}))
add("version_huge", "POST", "/v2/models/simple/versions/99999999999999999999/infer", body({"inputs": GOOD}))
add("version_9", "POST", "/v2/models/simple/versions/9/infer", body({"inputs": GOOD}))
add("version_0", "POST", "/v2/models/simple/versions/0/infer", body({"inputs": GOOD}))
add("version_01", "POST", "/v2/models/simple/versions/01/infer", body({"inputs": GOOD}))
add("unknown_model", "POST", "/v2/models/nope/infer", body({"inputs": GOOD}))
# --- outputs
add("dup_outputs", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]}))
add("dup_outputs_binary_mixed", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": False}}, {"name": "OUTPUT0", "parameters": {"binary_data": True}}]}))
add("unknown_output", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "NOPE"}]}))
add("outputs_not_array", "POST", I, body({"inputs": GOOD, "outputs": {"name": "OUTPUT0"}}))
add("output_no_name", "POST", I, body({"inputs": GOOD, "outputs": [{}]}))
add("output_name_num", "POST", I, body({"inputs": GOOD, "outputs": [{"name": 5}]}))
add("binary_data_not_bool", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}]}))
add("binary_data_output_not_bool", "POST", I, body({"inputs": GOOD, "parameters": {"binary_data_output": 1}}))
add("classification_not_uint", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"classification": "2"}}]}))
add("classification_negative", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"classification": -1}}]}))
add("classification_zero", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 0}}]}))
add("classification_and_shm", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 2, "shared_memory_region": "r", "shared_memory_byte_size": 64}}]}))
add("binary_and_shm", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True, "shared_memory_region": "r", "shared_memory_byte_size": 64}}]}))
# --- shapes
add("shape_negative", "POST", I, body({"inputs": [inp("INPUT0", (1, 16)), inp("INPUT1", (1, 16))]}).replace(b'"shape":[1,16]', b'"shape":[-1,16]', 1))
add("shape_float", "POST", I, body({"inputs": GOOD}).replace(b'"shape":[1,16]', b'"shape":[1.0,16]', 1))
add("shape_float_frac", "POST", I, body({"inputs": GOOD}).replace(b'"shape":[1,16]', b'"shape":[1.5,16]', 1))
add("shape_string", "POST", I, body({"inputs": GOOD}).replace(b'"shape":[1,16]', b'"shape":["1",16]', 1))
add("shape_not_array", "POST", I, body({"inputs": GOOD}).replace(b'"shape":[1,16]', b'"shape":16', 1))
add("shape_empty_batching", "POST", I, body({"inputs": [inp("INPUT0", (), data=[]), inp("INPUT1")]}))
add("shape_overflow_identity", "POST", "/v2/models/identity_fp32/infer", body({"inputs": [inp("INPUT0", (4294967296, 4294967296), "FP32", data=[])]}))
add("shape_overflow_simple", "POST", I, body({"inputs": [inp("INPUT0", (4294967296, 4294967296), data=[]), inp("INPUT1", (4294967296, 4294967296), data=[])]}))
add("shape_u64max_identity_bin0", "POST", "/v2/models/identity_fp32/infer", *binreq({"inputs": [inp("INPUT0", (4294967296, 4294967296), "FP32", data=None, params={"binary_data_size": 0})]}, []))
add("shape_batch_trunc_bin", "POST", I, *binreq({"inputs": [inp("INPUT0", (4294967297, 16), data=None, params={"binary_data_size": 64}), inp("INPUT1", (4294967297, 16), data=None, params={"binary_data_size": 64})]}, [b"\0" * 64, b"\0" * 64]))
# --- inputs
add("missing_input", "POST", I, body({"inputs": [inp("INPUT0")]}))
add("unknown_input_same_count", "POST", I, body({"inputs": [inp("INPUT0"), inp("BOGUS")]}))
add("extra_input", "POST", I, body({"inputs": GOOD + [inp("BOGUS")]}))
add("dup_input", "POST", I, body({"inputs": [inp("INPUT0"), inp("INPUT0"), inp("INPUT1")]}))
add("wrong_dtype", "POST", I, body({"inputs": [inp("INPUT0", dt="FP32"), inp("INPUT1")]}))
add("invalid_dtype", "POST", I, body({"inputs": [inp("INPUT0", dt="FLOAT"), inp("INPUT1")]}))
add("wrong_shape", "POST", I, body({"inputs": [inp("INPUT0", (1, 15)), inp("INPUT1")]}))
add("wrong_shape_nonbatch", "POST", "/v2/models/identity_fp32/infer", body({"inputs": [inp("INPUT0", (1, 2), "FP32")]}))
add("batch_too_big", "POST", I, body({"inputs": [inp("INPUT0", (9, 16)), inp("INPUT1", (9, 16))]}))
add("batch_mismatch", "POST", I, body({"inputs": [inp("INPUT0", (1, 16)), inp("INPUT1", (2, 16))]}))
add("input_not_object", "POST", I, body({"inputs": [5, inp("INPUT1")]}))
add("input_name_num", "POST", I, body({"inputs": [dict(inp("INPUT0"), name=5), inp("INPUT1")]}))
add("datatype_num", "POST", I, body({"inputs": [dict(inp("INPUT0"), datatype=5), inp("INPUT1")]}))
add("data_not_array", "POST", I, body({"inputs": [dict(inp("INPUT0"), data=5), inp("INPUT1")]}))
add("data_short", "POST", I, body({"inputs": [inp("INPUT0", data=rng(15)), inp("INPUT1")]}))
add("data_long", "POST", I, body({"inputs": [inp("INPUT0", data=rng(17)), inp("INPUT1")]}))
add("data_string_int32", "POST", I, body({"inputs": [inp("INPUT0", data=["a"] + rng(15)), inp("INPUT1")]}))
add("data_float_int32", "POST", I, body({"inputs": [inp("INPUT0", data=[1.5] + rng(15)), inp("INPUT1")]}))
add("data_string_fp32", "POST", "/v2/models/identity_fp32/infer", body({"inputs": [inp("INPUT0", (2,), "FP32", ["a", 1])]}))
add("data_num_bytes", "POST", "/v2/models/identity_bytes/infer", body({"inputs": [inp("INPUT0", (2,), "BYTES", [1, "a"])]}))
add("data_bytes_count", "POST", "/v2/models/identity_bytes/infer", body({"inputs": [inp("INPUT0", (3,), "BYTES", ["a", "b"])]}))
add("fp16_json", "POST", "/v2/models/identity_fp32/infer", body({"inputs": [inp("INPUT0", (2,), "FP16", [1.0, 2.0])]}))
add("missing_data", "POST", I, body({"inputs": [inp("INPUT0", data=None), inp("INPUT1")]}))
add("missing_shape", "POST", I, body({"inputs": [{k: v for k, v in inp("INPUT0").items() if k != "shape"}, inp("INPUT1")]}))
add("missing_name", "POST", I, body({"inputs": [{k: v for k, v in inp("INPUT0").items() if k != "name"}, inp("INPUT1")]}))
add("missing_datatype", "POST", I, body({"inputs": [{k: v for k, v in inp("INPUT0").items() if k != "datatype"}, inp("INPUT1")]}))
add("data_and_bds", "POST", I, *binreq({"inputs": [inp("INPUT0", params={"binary_data_size": 64}), inp("INPUT1")]}, [b"\0" * 64]))
add("data_and_shm", "POST", I, body({"inputs": [inp("INPUT0", params={"shared_memory_region": "r", "shared_memory_byte_size": 64}), inp("INPUT1")]}))
add("bds_and_shm", "POST", I, *binreq({"inputs": [inp("INPUT0", data=None, params={"binary_data_size": 64, "shared_memory_region": "r", "shared_memory_byte_size": 64}), inp("INPUT1")]}, [b"\0" * 64]))
add("bds_not_uint", "POST", I, *binreq({"inputs": [inp("INPUT0", data=None, params={"binary_data_size": "64"}), inp("INPUT1")]}, [b"\0" * 64]))
add("bds_negative", "POST", I, *binreq({"inputs": [inp("INPUT0", data=None, params={"binary_data_size": -1}), inp("INPUT1")]}, [b"\0" * 64]))
add("bds_wrong_size", "POST", I, *binreq({"inputs": [inp("INPUT0", data=None, params={"binary_data_size": 60}), inp("INPUT1")]}, [b"\0" * 60]))
add("bds_short_body", "POST", I, *binreq({"inputs": [inp("INPUT0", data=None, params={"binary_data_size": 64}), inp("INPUT1")]}, [b"\0" * 60]))
add("bds_extra_body", "POST", I, *binreq({"inputs": [inp("INPUT0", data=None, params={"binary_data_size": 64}), inp("INPUT1")]}, [b"\0" * 68]))
add("bds_no_ihcl", "POST", I, body({"inputs": [inp("INPUT0", data=None, params={"binary_data_size": 64}), inp("INPUT1")]}))
add("bds_zero", "POST", I, *binreq({"inputs": [inp("INPUT0", data=None, params={"binary_data_size": 0}), inp("INPUT1")]}, []))
# --- body / JSON / header length
add("malformed_json", "POST", I, b'{"inputs":[{"name":')
add("trailing_garbage", "POST", I, body({"inputs": GOOD}) + b"xyz")
add("json_array", "POST", I, b"[1,2,3]")
add("inputs_not_array", "POST", I, b'{"inputs":{}}')
add("empty_object", "POST", I, b"{}")
add("id_not_string", "POST", I, body({"id": 5, "inputs": GOOD}))
add("ihcl_too_big", "POST", I, body({"inputs": GOOD}), {"Inference-Header-Content-Length": "100000"})
add("ihcl_negative", "POST", I, body({"inputs": GOOD}), {"Inference-Header-Content-Length": "-5"})
add("ihcl_abc", "POST", I, body({"inputs": GOOD}), {"Inference-Header-Content-Length": "abc"})
add("ihcl_12abc", "POST", I, body({"inputs": GOOD}), {"Inference-Header-Content-Length": "12abc"})
add("ihcl_small", "POST", I, body({"inputs": GOOD}), {"Inference-Header-Content-Length": "100"})
add("ihcl_huge", "POST", I, body({"inputs": GOOD}), {"Inference-Header-Content-Length": "99999999999"})
add("content_encoding_br", "POST", I, body({"inputs": GOOD}), {"Content-Encoding": "br"})
add("gzip_bad", "POST", I, body({"inputs": GOOD}), {"Content-Encoding": "gzip"})
# --- parameters
def P(params):
    return body({"inputs": GOOD, "parameters": params})
add("params_not_object", "POST", I, P(5))
add("param_triton_reserved", "POST", I, P({"triton_foo": 1}))
add("param_array", "POST", I, P({"foo": [1]}))
add("param_null", "POST", I, P({"foo": None}))
add("param_object", "POST", I, P({"foo": {}}))
add("param_double", "POST", I, P({"foo": 1.5}))
add("priority_neg", "POST", I, P({"priority": -1}))
add("priority_str", "POST", I, P({"priority": "1"}))
add("timeout_str", "POST", I, P({"timeout": "x"}))
add("timeout_neg", "POST", I, P({"timeout": -1}))
add("seqid_bool_nonseq", "POST", I, P({"sequence_id": True}))
add("seqstart_str_nonseq", "POST", I, P({"sequence_start": "yes"}))
add("seqend_int_nonseq", "POST", I, P({"sequence_end": 1}))
add("seqid_neg_nonseq", "POST", I, P({"sequence_id": -5}))
S = "/v2/models/simple_sequence/infer"
SI = [inp("INPUT", (1, 1), data=[1])]
add("seq_no_id", "POST", S, body({"inputs": SI}))
add("seq_no_start", "POST", S, body({"inputs": SI, "parameters": {"sequence_id": 777}}))
add("seq_no_start_str", "POST", S, body({"inputs": SI, "parameters": {"sequence_id": "abc"}}))
add("seq_batch2", "POST", S, body({"inputs": [inp("INPUT", (2, 1), data=[1, 2])], "parameters": {"sequence_id": 778, "sequence_start": True}}))
add("seq_id_long", "POST", S, body({"inputs": SI, "parameters": {"sequence_id": "x" * 129, "sequence_start": True}}))
add("seq_id_neg", "POST", S, body({"inputs": SI, "parameters": {"sequence_id": -5, "sequence_start": True}}))
add("seq_id_zero", "POST", S, body({"inputs": SI, "parameters": {"sequence_id": 0, "sequence_start": True}}))
add("seq_start_int", "POST", S, body({"inputs": SI, "parameters": {"sequence_id": 9, "sequence_start": 1}}))
# --- shared memory (register)
SR = "/v2/systemsharedmemory/region/%s/register"
SU = "/v2/systemsharedmemory/region/%s/unregister"
add("shm_reg_ok_a", "POST", SR % "ra", body({"key": "/tcat_a", "offset": 0, "byte_size": 64}))
add("shm_reg_dup_name", "POST", SR % "ra", body({"key": "/tcat_a", "offset": 0, "byte_size": 64}))
add("shm_reg_same_key_other_name", "POST", SR % "ra2", body({"key": "/tcat_a", "offset": 0, "byte_size": 32}))
add("shm_reg_bad_key", "POST", SR % "rx", body({"key": "/does_not_exist_tcat", "offset": 0, "byte_size": 64}))
add("shm_reg_key_noslash", "POST", SR % "rx", body({"key": "tcat_b", "offset": 0, "byte_size": 64}))
add("shm_reg_reserved_prefix", "POST", SR % "rx", body({"key": "/triton_python_backend_shm_region_x", "offset": 0, "byte_size": 64}))
add("shm_reg_too_big", "POST", SR % "rx", body({"key": "/tcat_b", "offset": 0, "byte_size": 256}))
add("shm_reg_offset_too_big", "POST", SR % "rx", body({"key": "/tcat_b", "offset": 120, "byte_size": 16}))
add("shm_reg_overflow", "POST", SR % "rx", body({"key": "/tcat_b", "offset": 18446744073709551615, "byte_size": 2}))
add("shm_reg_unaligned", "POST", SR % "rx", body({"key": "/tcat_b", "offset": 8, "byte_size": 16}))
add("shm_reg_zero_size", "POST", SR % "rz", body({"key": "/tcat_zero", "offset": 0, "byte_size": 0}))
add("shm_reg_no_key", "POST", SR % "rx", body({"offset": 0, "byte_size": 64}))
add("shm_reg_no_size", "POST", SR % "rx", body({"key": "/tcat_b"}))
add("shm_reg_key_num", "POST", SR % "rx", body({"key": 5, "byte_size": 64}))
add("shm_reg_offset_neg", "POST", SR % "rx", body({"key": "/tcat_b", "offset": -1, "byte_size": 64}))
add("shm_reg_size_str", "POST", SR % "rx", body({"key": "/tcat_b", "byte_size": "64"}))
add("shm_reg_malformed", "POST", SR % "rx", b"{")
add("shm_reg_no_region", "POST", "/v2/systemsharedmemory/register", body({"key": "/tcat_b", "byte_size": 64}))
add("shm_reg_ok_b", "POST", SR % "rb", body({"key": "/tcat_b", "offset": 0, "byte_size": 128}))
add("shm_status_unknown", "GET", "/v2/systemsharedmemory/region/nope/status")
add("shm_unreg_unknown", "POST", SU % "nope")
add("cuda_status_unknown", "GET", "/v2/cudasharedmemory/region/nope/status")
add("cuda_status_sys_region", "GET", "/v2/cudasharedmemory/region/rb/status")
# --- shared memory in infer
def shm_in(region, off, size, name="INPUT0"):
    p = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if off is not None:
        p["shared_memory_offset"] = off
    return inp(name, data=None, params=p)
add("infer_shm_unknown_region", "POST", I, body({"inputs": [shm_in("nope", 0, 64), inp("INPUT1")]}))
add("infer_shm_offset_beyond", "POST", I, body({"inputs": [shm_in("rb", 200, 64), inp("INPUT1")]}))
add("infer_shm_offset_eq_size", "POST", I, body({"inputs": [shm_in("rb", 128, 0), inp("INPUT1")]}))
add("infer_shm_range_over", "POST", I, body({"inputs": [shm_in("rb", 100, 64), inp("INPUT1")]}))
add("infer_shm_size_zero", "POST", I, body({"inputs": [shm_in("rb", 0, 0), inp("INPUT1")]}))
add("infer_shm_size_wrong", "POST", I, body({"inputs": [shm_in("rb", 0, 60), inp("INPUT1")]}))
add("infer_shm_ok", "POST", I, body({"inputs": [shm_in("rb", 0, 64), inp("INPUT1")]}))
add("infer_shm_no_size", "POST", I, body({"inputs": [inp("INPUT0", data=None, params={"shared_memory_region": "rb"}), inp("INPUT1")]}))
add("infer_shm_offset_no_region", "POST", I, body({"inputs": [inp("INPUT0", params={"shared_memory_offset": 0}), inp("INPUT1")]}))
add("infer_shm_region_num", "POST", I, body({"inputs": [inp("INPUT0", data=None, params={"shared_memory_region": 5, "shared_memory_byte_size": 64}), inp("INPUT1")]}))
add("infer_shm_offset_neg", "POST", I, body({"inputs": [inp("INPUT0", data=None, params={"shared_memory_region": "rb", "shared_memory_byte_size": 64, "shared_memory_offset": -1}), inp("INPUT1")]}))
add("infer_shm_size_str", "POST", I, body({"inputs": [inp("INPUT0", data=None, params={"shared_memory_region": "rb", "shared_memory_byte_size": "64"}), inp("INPUT1")]}))
add("infer_shm_out_small", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "rb", "shared_memory_byte_size": 4}}]}))
add("infer_shm_out_unknown", "POST", I, body({"inputs": GOOD, "outputs": [{"name": "OUTPUT0", "parameters": {"shared_memory_region": "nope", "shared_memory_byte_size": 64}}]}))
add("shm_unreg_ok", "POST", SU % "ra")
add("shm_unreg_all", "POST", "/v2/systemsharedmemory/unregister")

if len(sys.argv) > 2:
    cases.clear()
add("classification_bytes_output", "POST", "/v2/models/identity_bytes/infer", body({"inputs": [inp("INPUT0", (2,), "BYTES", ["a", "b"])], "outputs": [{"name": "OUTPUT0", "parameters": {"classification": 1}}]}))
out = {}
for name, method, path, data, headers in cases:
    try:
        out[name] = req(method, path, data, headers)
    except Exception as e:
        out[name] = ("EXC", repr(e))
json.dump(out, sys.stdout, indent=0)
