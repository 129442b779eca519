import json, sys
sys.argv = [sys.argv[0], sys.argv[1]]
exec(open(__import__('os').path.join(__import__('os').path.dirname(__file__), 'probe_http.py')).read().split("I = \"/v2/models/simple/infer\"")[0])
cases = []
def add(name, method, path, data=b"", headers=None):
    cases.append((name, method, path, data, headers))
SR = "/v2/systemsharedmemory/region/%s/register"
SU = "/v2/systemsharedmemory/region/%s/unregister"
with open("/dev/shm/tcat_c", "wb") as f: f.truncate(8192)
add("shm_reg_ok_a", "POST", SR % "ra", body({"key": "/tcat_a", "offset": 0, "byte_size": 64}))
add("shm_reg_dup_name", "POST", SR % "ra", body({"key": "/tcat_b", "offset": 0, "byte_size": 64}))
add("shm_reg_same_key_other_name", "POST", SR % "ra2", body({"key": "/tcat_a", "offset": 0, "byte_size": 32}))
add("shm_reg_bad_key", "POST", SR % "r1", body({"key": "/does_not_exist_tcat", "offset": 0, "byte_size": 64}))
add("shm_reg_key_slash_only", "POST", SR % "r2", body({"key": "/", "offset": 0, "byte_size": 64}))
add("shm_reg_key_empty", "POST", SR % "r3", body({"key": "", "offset": 0, "byte_size": 64}))
add("shm_reg_key_nested", "POST", SR % "r4", body({"key": "/a/b", "offset": 0, "byte_size": 64}))
add("shm_reg_reserved_prefix", "POST", SR % "r5", body({"key": "/triton_python_backend_shm_region_x", "offset": 0, "byte_size": 64}))
add("shm_reg_too_big", "POST", SR % "r6", body({"key": "/tcat_b", "offset": 0, "byte_size": 256}))
add("shm_reg_offset_too_big", "POST", SR % "r7", body({"key": "/tcat_b", "offset": 120, "byte_size": 16}))
add("shm_reg_overflow", "POST", SR % "r8", body({"key": "/tcat_b", "offset": 18446744073709551615, "byte_size": 2}))
add("shm_reg_overflow2", "POST", SR % "r8b", body({"key": "/tcat_b", "offset": 64, "byte_size": 18446744073709551615}))
add("shm_reg_unaligned", "POST", SR % "r9", body({"key": "/tcat_b", "offset": 8, "byte_size": 16}))
add("shm_reg_page_aligned_off", "POST", SR % "r9b", body({"key": "/tcat_c", "offset": 4096, "byte_size": 16}))
add("shm_reg_offset_eq_size", "POST", SR % "r10", body({"key": "/tcat_b", "offset": 128, "byte_size": 0}))
add("shm_reg_size0", "POST", SR % "r11", body({"key": "/tcat_b", "offset": 0, "byte_size": 0}))
add("shm_reg_zero_file", "POST", SR % "rz", body({"key": "/tcat_zero", "offset": 0, "byte_size": 0}))
add("shm_reg_no_key", "POST", SR % "r12", body({"offset": 0, "byte_size": 64}))
add("shm_reg_no_size", "POST", SR % "r13", body({"key": "/tcat_b"}))
add("shm_reg_key_num", "POST", SR % "r14", body({"key": 5, "byte_size": 64}))
add("shm_reg_offset_neg", "POST", SR % "r15", body({"key": "/tcat_b", "offset": -1, "byte_size": 64}))
add("shm_reg_size_str", "POST", SR % "r16", body({"key": "/tcat_b", "byte_size": "64"}))
add("shm_reg_malformed", "POST", SR % "r17", b"{")
add("shm_reg_empty_body", "POST", SR % "r17b", b"")
add("shm_reg_array_body", "POST", SR % "r17c", b"[]")
add("shm_reg_no_region", "POST", "/v2/systemsharedmemory/register", body({"key": "/tcat_b", "byte_size": 64}))
add("shm_status_all", "GET", "/v2/systemsharedmemory/status")
add("shm_reg_get", "GET", SR % "r18")
add("cuda_reg_no_region", "POST", "/v2/cudasharedmemory/register", body({}))
add("cuda_reg", "POST", "/v2/cudasharedmemory/region/c1/register", body({"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 64}))
add("cuda_unreg_unknown", "POST", "/v2/cudasharedmemory/region/nope/unregister")
add("cuda_unreg_sysregion", "POST", "/v2/cudasharedmemory/region/ra/unregister")
add("shm_unreg_ra", "POST", SU % "ra")
add("shm_unreg_ra_again", "POST", SU % "ra")
add("shm_unreg_all", "POST", "/v2/systemsharedmemory/unregister")
out = {}
for name, method, path, data, headers in cases:
    try:
        out[name] = req(method, path, data, headers)
    except Exception as e:
        out[name] = ("EXC", repr(e))
json.dump(out, sys.stdout, indent=0)
