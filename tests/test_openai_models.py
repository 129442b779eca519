"""/v1 over real models through their adapters, with the official `openai` client, each answer
checked against a reference computed without Tessera (tests/openai_reference.py):

- `minilm` (all-MiniLM-L6-v2 in ONNX) through the Rust adapter and through a Python one: 100
  sentences against sentence-transformers on the same weights, base64 (the client's default) and
  float, token arrays, `dimensions`;
- `tiny_gpt` (a seeded GPT-2 shaped decoder) through the Rust adapter: chat and completions, whole
  and streamed, greedy and seeded, stop strings, against a Python loop over the same ONNX file,
  tokenizer and chat template (transformers' apply_chat_template);
- refusals in OpenAI's shape (context length naming both counts, parameters by name) and an
  adapter that traps failing only its own request."""

from __future__ import annotations

import base64
import json
import re
import shutil

import numpy as np
import openai
import pytest
import requests

import openai_reference as ref
from tessera_repos import copy_model, quickstart_repo
from tessera_testlib import start_server, wait_until

SENTENCES_SEED = 56


def sentences(count: int = 100) -> list[str]:
    """Sentences of mixed length (1 to 80 words) from our corpus, with some non-ASCII ones."""
    words = (ref.ROOT / "scripts" / "openai_corpus.txt").read_text().split()
    rng = np.random.default_rng(SENTENCES_SEED)
    out = ["Héllo, wörld!", "日本語の文章です。", "naïve café — résumé…", "x"]
    while len(out) < count:
        n = int(rng.choice([1, 3, 8, 20, 45, 80]))
        start = int(rng.integers(0, len(words) - n))
        text = " ".join(words[start:start + n])
        if len(ref.minilm_ids(text)) <= 250:  # within the model's context (256)
            out.append(text)
    return out


PY_ADAPTER_CONFIG = '''
name: "minilm_openai_py"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "request" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "embedding" data_type: TYPE_FP32 dims: [ -1, -1 ] },
  { name: "num_input_tokens" data_type: TYPE_INT32 dims: [ 1 ] }
]
parameters { key: "allowed_models" value: { string_value: "minilm_py" } }
parameters { key: "filesystem" value: { string_value: "read-only" } }
parameters { key: "max_execute_ms" value: { string_value: "120000" } }
'''


def v1_repo(root):
    repo = root / "repo"
    for name in ("minilm", "minilm_openai", "tiny_gpt", "tiny_gpt_openai"):
        copy_model(repo, name)
    # The same encoder through the Python adapter.
    minilm_py = (quickstart_repo() / "minilm" / "config.pbtxt").read_text().replace('"minilm_openai"', '"minilm_openai_py"')
    minilm_py = re.sub(r'(?m)^name:.*$', 'name: "minilm_py"', minilm_py)
    (repo / "minilm_py" / "1").mkdir(parents=True)
    (repo / "minilm_py" / "config.pbtxt").write_text(minilm_py)
    (repo / "minilm_py" / "1" / "model.onnx").hardlink_to(repo / "minilm" / "1" / "model.onnx")
    py = repo / "minilm_openai_py"
    (py / "1").mkdir(parents=True)
    (py / "config.pbtxt").write_text(PY_ADAPTER_CONFIG)
    shutil.copy(ref.ROOT / "example-guests" / "openai_adapter_python" / "model.py", py / "1" / "model.py")
    shutil.copy(quickstart_repo() / "minilm_openai" / "1" / "tokenizer.json", py / "1" / "tokenizer.json")
    # The decoder behind an adapter with little memory: a large prompt makes it trap.
    tight = (quickstart_repo() / "tiny_gpt" / "config.pbtxt").read_text().replace('"tiny_gpt_openai"', '"tight_openai"')
    copy_model(repo, "tiny_gpt", "tight_gpt", config=re.sub(r'(?m)^name:.*$', 'name: "tight_gpt"', tight))
    adapter = (quickstart_repo() / "tiny_gpt_openai" / "config.pbtxt").read_text()
    adapter = re.sub(r'(?m)^name:.*$', 'name: "tight_openai"', adapter).replace('"tiny_gpt" }', '"tight_gpt" }')
    adapter += 'parameters { key: "max_memory_bytes" value: { string_value: "33554432" } }\n'
    copy_model(repo, "tiny_gpt_openai", "tight_openai", config=adapter)
    return repo


@pytest.fixture(scope="module")
def v1(tmp_path_factory, tessera_binary, wasm_cache):
    root = tmp_path_factory.mktemp("openai-models")
    srv = start_server(root, [v1_repo(root)], [f"--wasm-cache-dir={wasm_cache}"], name="openai-models",
                       ready=("minilm", "minilm_openai", "minilm_py", "minilm_openai_py", "tiny_gpt",
                              "tiny_gpt_openai", "tight_gpt", "tight_openai"))
    yield srv
    srv.stop_and_check()


def client(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="unused", max_retries=0, timeout=120)


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got * want).sum(axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))


def test_models_with_an_adapter_are_listed(v1):
    listed = {m.id for m in client(v1).models.list()}
    assert listed == {"minilm", "minilm_py", "tiny_gpt", "tight_gpt"}, "the adapters themselves are not models of /v1"


@pytest.mark.parametrize("model", ["minilm", "minilm_py"])
def test_embeddings_match_sentence_transformers(v1, model):
    texts = sentences()
    want = ref.embed(texts)
    c = client(v1)
    default = c.embeddings.create(model=model, input=texts)  # the client asks for base64
    floats = c.embeddings.create(model=model, input=texts, encoding_format="float")
    for answer in (default, floats):
        got = np.array([d.embedding for d in sorted(answer.data, key=lambda d: d.index)], dtype=np.float32)
        assert got.shape == (100, 384)
        worst = cosines(got, want).min()
        assert worst >= 0.9999, f"{model}: the worst of 100 cosines is {worst}"
    assert default.usage.prompt_tokens == sum(len(ref.minilm_ids(t)) for t in texts)
    assert default.usage.total_tokens == default.usage.prompt_tokens and default.model == model


def test_embeddings_take_token_arrays_and_dimensions(v1):
    c = client(v1)
    text = "Tessera runs custom code in a sandbox."
    by_text = np.array(c.embeddings.create(model="minilm", input=text, encoding_format="float").data[0].embedding)
    by_ids = c.embeddings.create(model="minilm", input=[ref.minilm_ids(text)], encoding_format="float")
    assert float(np.dot(by_text, np.array(by_ids.data[0].embedding))) > 0.99999
    raw = requests.post(f"{v1.base_url}/v1/embeddings", timeout=60, json={
        "model": "minilm", "input": text, "encoding_format": "base64", "dimensions": 64}).json()
    short = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    want = by_text[:64] / np.linalg.norm(by_text[:64])
    assert short.shape == (64,) and np.allclose(short, want, atol=1e-6)
    with pytest.raises(openai.BadRequestError) as caught:
        c.embeddings.create(model="minilm", input=text, dimensions=1000)
    assert "384" in str(caught.value)


def chat_messages(text: str) -> list[dict]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]


@pytest.mark.parametrize("sampling", [dict(temperature=0), dict(temperature=0.9, top_p=0.9, seed=7),
                                      dict(temperature=1.3, seed=123456789)])
def test_chat_matches_the_reference_loop_whole_and_streamed(v1, sampling):
    messages = chat_messages("Tell me about the sandbox")
    prompt = ref.chat_prompt(messages)
    want = ref.generate(prompt, max_tokens=24, temperature=sampling.get("temperature", 1.0),
                        top_p=sampling.get("top_p", 1.0), seed=sampling.get("seed", 0))
    c = client(v1)
    whole = c.chat.completions.create(model="tiny_gpt", messages=messages, max_completion_tokens=24, **sampling)
    choice = whole.choices[0]
    assert (choice.message.role, choice.message.content, choice.finish_reason) == ("assistant", want.text,
                                                                                   want.finish_reason)
    assert (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (want.prompt_tokens, want.completion_tokens)
    assert whole.object == "chat.completion" and whole.id.startswith("chatcmpl-")
    chunks = list(c.chat.completions.create(model="tiny_gpt", messages=messages, max_completion_tokens=24,
                                            stream=True, stream_options={"include_usage": True}, **sampling))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert text == want.text and finishes[-1] == want.finish_reason and set(finishes[:-1]) == {None}
    assert len(chunks) > 3, "streamed a token at a time, not whole"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == want.completion_tokens


def test_completions_take_text_and_token_prompts(v1):
    c = client(v1)
    want = ref.generate("The server", max_tokens=12, temperature=0.7, seed=11)
    by_text = c.completions.create(model="tiny_gpt", prompt="The server", max_tokens=12, temperature=0.7, seed=11)
    by_ids = c.completions.create(model="tiny_gpt", prompt=ref.gpt_ids("The server"), max_tokens=12,
                                  temperature=0.7, seed=11)
    for answer in (by_text, by_ids):
        assert (answer.choices[0].text, answer.choices[0].finish_reason) == (want.text, want.finish_reason)
        assert answer.usage.completion_tokens == want.completion_tokens
    default = c.completions.create(model="tiny_gpt", prompt="The server", temperature=0)
    assert default.usage.completion_tokens == 16, "OpenAI's default max_tokens for completions"


def test_a_stop_string_ends_the_text_before_it_streamed_or_not(v1):
    free = ref.generate("Models", max_tokens=40, temperature=0.8, seed=5)
    assert len(free.text) > 6, free
    stop = free.text[len(free.text) // 2:len(free.text) // 2 + 2]
    want = ref.generate("Models", max_tokens=40, temperature=0.8, seed=5, stop=[stop])
    assert want.finish_reason == "stop"
    c = client(v1)
    whole = c.completions.create(model="tiny_gpt", prompt="Models", max_tokens=40, temperature=0.8, seed=5, stop=stop)
    assert (whole.choices[0].text, whole.choices[0].finish_reason) == (want.text, "stop")
    pieces = [ch.choices[0].text for ch in c.completions.create(
        model="tiny_gpt", prompt="Models", max_tokens=40, temperature=0.8, seed=5, stop=[stop], stream=True)]
    assert "".join(pieces) == want.text and not any(stop in p for p in pieces)


def test_refusals_name_what_is_wrong(v1):
    c = client(v1)
    with pytest.raises(openai.BadRequestError) as caught:
        c.chat.completions.create(model="tiny_gpt", messages=chat_messages("word " * 200), max_tokens=5)
    message = str(caught.value)
    assert "maximum context length is 128 tokens" in message and re.search(r"\d+ in the messages", message)
    for kwargs, param in [(dict(n=2), "n"), (dict(frequency_penalty=0.5), "frequency_penalty"),
                          (dict(logprobs=True), "logprobs")]:
        with pytest.raises(openai.BadRequestError) as caught:
            c.chat.completions.create(model="tiny_gpt", messages=chat_messages("hi"), **kwargs)
        assert caught.value.body["param"] == param, caught.value.body
    with pytest.raises(openai.BadRequestError, match="generates text"):
        c.embeddings.create(model="tiny_gpt", input="hi")
    with pytest.raises(openai.BadRequestError, match="embedding model"):
        c.chat.completions.create(model="minilm", messages=chat_messages("hi"))
    with pytest.raises(openai.BadRequestError, match="maximum context length is 256"):
        c.embeddings.create(model="minilm", input="word " * 300)
    with pytest.raises(openai.NotFoundError):
        c.chat.completions.create(model="tiny_gpt_openai", messages=chat_messages("hi"))
    assert c.chat.completions.create(model="tiny_gpt", messages=chat_messages("hi"), max_tokens=2).choices


def test_an_adapter_that_traps_fails_only_its_own_request(v1):
    c = client(v1)
    huge = "memory " * 2_000_000  # 14 MB of prompt: the adapter's 32 MiB cannot tokenize it
    answer = requests.post(f"{v1.base_url}/v1/completions", timeout=120,
                           json={"model": "tight_gpt", "prompt": huge, "max_tokens": 2})
    assert answer.status_code == 500, answer.text[:300]
    error = answer.json()["error"]
    assert error["type"] == "server_error" and "memory limit" in error["message"], error
    assert c.embeddings.create(model="minilm", input="still serving").data, "other models serve on"
    again = c.completions.create(model="tight_gpt", prompt="small", max_tokens=3, temperature=0)
    assert again.usage.completion_tokens == 3, "the adapter serves its next request"
    assert requests.get(f"{v1.base_url}/v2/models/tight_openai/ready", timeout=10).status_code == 200


def test_a_client_that_leaves_mid_stream_stops_the_adapter(v1):
    body = {"model": "tiny_gpt", "prompt": "Leaving", "max_tokens": 110, "temperature": 0, "stream": True}
    with requests.post(f"{v1.base_url}/v1/completions", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200
        first = next(line for line in r.iter_lines() if line.startswith(b"data: "))
        assert json.loads(first[6:])["choices"][0]["text"] is not None
    # The connection is closed: the adapter's next send fails, and it stops.
    pattern = r"its caller has gone; stopped after (\d+) tokens"
    wait_until(lambda: re.search(pattern, v1.log_text()), 60, "the adapter to stop")
    stopped = re.search(pattern, v1.log_text())
    assert int(stopped.group(1)) < 100, stopped.group(0)
    assert client(v1).completions.create(model="tiny_gpt", prompt="next", max_tokens=2).usage.completion_tokens == 2


def test_a_v1_call_is_one_trace_with_its_adapter_and_model_as_children(server_factory, repo, tmp_path, wasm_cache):
    for name in ("tiny_gpt", "tiny_gpt_openai"):
        copy_model(repo, name)
    trace_file = tmp_path / "trace.json"
    srv = server_factory(repo, [f"--wasm-cache-dir={wasm_cache}", "--trace-config", f"triton,file={trace_file}",
                                "--trace-config", "level=TIMESTAMPS", "--trace-config", "rate=1"])
    wait_until(lambda: requests.get(f"{srv.base_url}/v2/models/tiny_gpt_openai/ready", timeout=5).ok, 300,
               "tiny_gpt_openai ready")
    answer = client(srv).chat.completions.create(model="tiny_gpt", messages=chat_messages("trace me"),
                                                 max_tokens=3, temperature=0)
    assert answer.usage.completion_tokens == 3
    srv.stop_and_check()
    merged: dict[int, dict] = {}
    for obj in json.loads(trace_file.read_text()):
        entry = merged.setdefault(obj["id"], {"names": []})
        entry.update({k: obj[k] for k in ("model_name", "parent_id") if k in obj})
        entry["names"] += [t["name"] for t in obj.get("timestamps", [])]
    [(root_id, root)] = [(i, t) for i, t in merged.items() if not t.get("parent_id")]
    assert root["model_name"] == "tiny_gpt" and "HTTP_RECV_START" in root["names"], root
    [(adapter_id, adapter)] = [(i, t) for i, t in merged.items() if t.get("model_name") == "tiny_gpt_openai"]
    assert adapter["parent_id"] == root_id and "COMPUTE_START" in adapter["names"], adapter
    steps = [t for t in merged.values() if t.get("model_name") == "tiny_gpt" and t.get("parent_id")]
    assert len(steps) == 3 and all(t["parent_id"] == adapter_id for t in steps), steps


# Chat templates in the styles models ship (a default system prompt, role checks with
# raise_exception, Python string methods, loop variables, namespace), rendered by the adapter and
# by transformers: the same prompt gives the same tokens and text.
TEMPLATES = {
    "system_default": (
        "{%- if messages[0]['role'] == 'system' %}"
        "{{- '<|system|>\\n' + messages[0]['content'].strip() + '<|end|>\\n' }}{%- set rest = messages[1:] %}"
        "{%- else %}{{- '<|system|>\\nYou are helpful.<|end|>\\n' }}{%- set rest = messages %}{%- endif %}\n"
        "{%- for m in rest %}\n"
        "  {%- if m['role'] not in ['user', 'assistant'] %}"
        "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}\n"
        "  {{- '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"),
    "loop_and_namespace": (
        "{% set ns = namespace(turns=0) %}"
        "{% for message in messages %}{% if message.role == 'user' %}{% set ns.turns = ns.turns + 1 %}{% endif %}"
        "{{ '<|' ~ message.role ~ '|>' }}{{ message.content | trim | lower if loop.first else message.content }}"
        "{% if not loop.last %}{{ '<|end|>' }}{% endif %}\n{% endfor %}"
        "{{ eos_token if ns.turns > 1 else '' }}{% if add_generation_prompt %}<|assistant|>{% endif %}"),
}


@pytest.mark.parametrize("style", sorted(TEMPLATES))
def test_chat_templates_render_as_transformers_renders_them(server_factory, repo, tmp_path, wasm_cache, style):
    copy_model(repo, "tiny_gpt")
    adapter = copy_model(repo, "tiny_gpt_openai")
    config = json.loads((adapter / "1" / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATES[style]
    (adapter / "1" / "tokenizer_config.json").write_text(json.dumps(config))
    srv = server_factory(repo, [f"--wasm-cache-dir={wasm_cache}"])
    wait_until(lambda: requests.get(f"{srv.base_url}/v2/models/tiny_gpt_openai/ready", timeout=5).ok, 300,
               "tiny_gpt_openai ready")
    messages = [{"role": "system", "content": "  Be Brief.  "}, {"role": "user", "content": " Hello THERE "},
                {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Again?"}]
    prompt = ref.chat_prompt(messages, adapter / "1")
    want = ref.generate(prompt, max_tokens=12, temperature=0)
    got = client(srv).chat.completions.create(model="tiny_gpt", messages=messages, max_tokens=12, temperature=0)
    assert got.usage.prompt_tokens == want.prompt_tokens, (style, prompt)
    assert got.choices[0].message.content == want.text
    if style == "system_default":
        with pytest.raises(openai.BadRequestError, match="Only user and assistant roles are supported!"):
            client(srv).chat.completions.create(model="tiny_gpt", messages=[{"role": "tool", "content": "x"}])
