"""OpenAI's API on the HTTP door, driven by the official `openai` client: models that speak
Triton's vLLM tensor convention listed and completed, whole and streamed; every refusal in
OpenAI's error shape with the server serving on; the restricted `openai` group."""

from __future__ import annotations

import json

import openai
import pytest
import requests

from tessera_testlib import copy_model, free_port, start_server, wait_model_ready, wait_until

# A vLLM-shaped model: text_input, stream, sampling_parameters (JSON) and the usage flags in;
# text_output and the token counts out. It "generates" the prompt's words upper-cased, one token
# a word, at most max_tokens of them, and streams a word per response.
ECHO_LLM = '''
import json

import triton_python_backend_utils as pb_utils


def flag(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else bool(tensor.as_list()[0])


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            prompt = pb_utils.get_input_tensor_by_name(request, "text_input").as_list()[0].decode()
            params = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
            params = json.loads(params.as_list()[0]) if params is not None else {}
            words = prompt.split()
            out = [w.upper() for w in words][:params.get("max_tokens", 16)]
            head = "" if flag(request, "exclude_input_in_output", False) else prompt + " "

            def answer(text, produced):  # the counts so far, in every response (as vLLM's backend)
                return pb_utils.InferenceResponse([pb_utils.Tensor("text_output", [text], "BYTES"),
                                                   pb_utils.Tensor("num_input_tokens", [len(words)], "UINT32"),
                                                   pb_utils.Tensor("num_output_tokens", [produced], "UINT32")])

            if prompt == "forever":  # until its caller goes
                sent = 0
                while sent < 1_000_000 and not sender.is_cancelled():
                    try:
                        sender.send(answer(" x", sent + 1))
                    except pb_utils.TritonModelException:
                        break
                    sent += 1
                pb_utils.Logger.log_info("echo_llm: stopped after %d, cancelled=%s" % (sent, request.is_cancelled()))
                if not sender.is_cancelled():
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            elif flag(request, "stream", False):
                for i, word in enumerate(out):
                    sender.send(answer((head if i == 0 else " ") + word, i + 1))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                sender.send(answer(head + " ".join(out), len(out)), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
'''

ECHO_LLM_CONFIG = '''
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "exclude_input_in_output" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_input_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "num_input_tokens" data_type: TYPE_UINT32 dims: [ 1 ] },
  { name: "num_output_tokens" data_type: TYPE_UINT32 dims: [ 1 ] }
]
parameters { key: "max_execute_ms" value: { string_value: "60000" } }
'''

SECRET = "openai-s3cret"


def echo_repo(root):
    repo = root / "repo"
    (repo / "echo_llm" / "1").mkdir(parents=True)
    (repo / "echo_llm" / "1" / "model.py").write_text(ECHO_LLM)
    (repo / "echo_llm" / "config.pbtxt").write_text(ECHO_LLM_CONFIG)
    copy_model(repo, "add_sub")
    return repo


@pytest.fixture(scope="module")
def llm(tmp_path_factory, tessera_binary, wasm_cache):
    root = tmp_path_factory.mktemp("openai")
    srv = start_server(root, [echo_repo(root)], [f"--wasm-cache-dir={wasm_cache}",
                                                 f"--http-restricted-api=openai:x-openai-key={SECRET}"],
                       name="openai", ready=("echo_llm", "add_sub"))
    yield srv
    srv.stop_and_check()


def client(srv, key: str | None = SECRET) -> openai.OpenAI:
    headers = {"x-openai-key": key} if key else {}
    return openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", default_headers=headers, max_retries=0)


def post(srv, path: str, body, key: str | None = SECRET, **kw) -> requests.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    headers = {"content-type": "application/json", **({"x-openai-key": key} if key else {})}
    return requests.post(f"{srv.base_url}{path}", data=data, headers=headers, timeout=60, **kw)


def test_the_openai_client_lists_and_completes(llm):
    c = client(llm)
    assert [m.id for m in c.models.list()] == ["echo_llm"], "only models /v1 can serve are listed"
    assert c.models.retrieve("echo_llm").owned_by == "tessera"
    with pytest.raises(openai.NotFoundError) as caught:
        c.models.retrieve("add_sub")
    assert "text_input" in str(caught.value)
    done = c.completions.create(model="echo_llm", prompt="the quick brown fox", max_tokens=3, temperature=0.5)
    assert done.object == "text_completion" and done.model == "echo_llm" and done.id.startswith("cmpl-")
    assert [(ch.index, ch.text, ch.finish_reason) for ch in done.choices] == [(0, "THE QUICK BROWN", "length")]
    assert (done.usage.prompt_tokens, done.usage.completion_tokens, done.usage.total_tokens) == (4, 3, 7)
    echoed = c.completions.create(model="echo_llm", prompt="two words", echo=True)
    assert echoed.choices[0].text == "two words TWO WORDS" and echoed.choices[0].finish_reason == "stop"


def test_a_streamed_completion_is_a_chunk_per_response_then_usage_and_done(llm):
    chunks = list(client(llm).completions.create(model="echo_llm", prompt="a b c", stream=True,
                                                  stream_options={"include_usage": True}))
    texts = [ch.choices[0].text for ch in chunks if ch.choices]
    assert texts[:3] == ["A", " B", " C"] and "".join(texts) == "A B C", texts
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}, finishes
    assert all(ch.usage is None for ch in chunks[:-1]) and chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 3)
    raw = post(llm, "/v1/completions", {"model": "echo_llm", "prompt": "x y", "stream": True}, stream=True)
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    events = [line for line in raw.text.split("\n\n") if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]", events


@pytest.mark.parametrize("body,status,expected,param", [
    ({"model": "nope", "prompt": "x"}, 404, "does not exist", "model"),
    ('{"model": "echo_llm", "prompt": ', 400, "could not parse the JSON body", None),
    ({"model": "echo_llm", "prompt": "x", "frobnicate": 1}, 400, "Unrecognized request argument supplied: frobnicate",
     None),
    ({"model": "echo_llm", "prompt": "x", "n": 2}, 400, "n must be 1", "n"),
    ({"model": "echo_llm", "prompt": "x", "logit_bias": {"1": 5}}, 400, "'logit_bias'", "logit_bias"),
    ({"model": "echo_llm", "prompt": [1, 2, 3]}, 400, "token ids", "prompt"),
    ({"model": "echo_llm", "prompt": ["a", "b"]}, 400, "one prompt per request", "prompt"),
    ({"model": "echo_llm", "prompt": "x", "temperature": 5}, 400, "'temperature'", "temperature"),
    ({"model": "add_sub", "prompt": "x"}, 404, "text_input", "model"),
])
def test_a_bad_request_gets_openais_error_shape_and_the_server_serves_on(llm, body, status, expected, param):
    r = post(llm, "/v1/completions", body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert expected in error["message"] and error["type"] == "invalid_request_error", error
    assert error["param"] == param and set(error) == {"message", "type", "param", "code"}, error
    ok = client(llm).completions.create(model="echo_llm", prompt="still here", max_tokens=1)
    assert ok.choices[0].text == "STILL"


def test_a_client_that_leaves_mid_stream_stops_the_generation(llm):
    """The model would stream a million chunks: the client reads five and closes the connection,
    and the model sees is_cancelled (or a failed send) and stops, then serves the next request."""
    r = post(llm, "/v1/completions", {"model": "echo_llm", "prompt": "forever", "stream": True}, stream=True)
    lines = r.iter_lines()
    events = [line for line in (next(lines) for _ in range(10)) if line][:5]
    assert all(e.startswith(b"data: {") for e in events), events
    r.close()
    wait_until(lambda: "echo_llm: stopped after" in llm.log_text(), 30, "the model to stop", llm)
    line = next(ln for ln in llm.log_text().splitlines() if "echo_llm: stopped after" in ln)
    assert int(line.split("stopped after ")[1].split(",")[0]) < 100_000 and "cancelled=True" in line, line
    assert client(llm).completions.create(model="echo_llm", prompt="next one").choices[0].text == "NEXT ONE"


def test_the_openai_group_is_restricted_by_its_header_and_v2_is_not(llm):
    for path in ("/v1/models", "/v1/models/echo_llm"):
        r = requests.get(f"{llm.base_url}{path}", timeout=30)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["type"] == "authentication_error" and "x-openai-key" in r.json()["error"]["message"]
    r = post(llm, "/v1/completions", {"model": "echo_llm", "prompt": "x"}, key="wrong")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_auth"
    with pytest.raises(openai.AuthenticationError):
        client(llm, key=None).models.list()
    assert requests.get(f"{llm.base_url}/v2/models/add_sub/ready", timeout=30).status_code == 200
    assert requests.get(f"{llm.base_url}/v1/nothing", timeout=30, headers={"x-openai-key": SECRET}).status_code == 404


def test_v1_on_a_port_of_its_own_serves_only_v1(server_factory, tmp_path, wasm_cache):
    port = free_port()
    srv = server_factory(echo_repo(tmp_path), [f"--wasm-cache-dir={wasm_cache}", f"--openai-port={port}",
                                               "--openai-address=127.0.0.1"])
    wait_model_ready(srv, "echo_llm")
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    assert [m.id for m in c.models.list()] == ["echo_llm"]
    assert c.completions.create(model="echo_llm", prompt="own port").choices[0].text == "OWN PORT"
    r = requests.get(f"http://127.0.0.1:{port}/v2/health/ready", timeout=30)
    assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error", r.text
    assert requests.get(f"{srv.base_url}/v1/models", timeout=30).json()["data"][0]["id"] == "echo_llm"
