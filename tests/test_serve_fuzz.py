"""`spectui serve` under generated input (hypothesis): JSON schemas, request bodies, raw bytes and
headers thrown at one running server. Whatever comes, it answers (an HTTP status, never a dropped
connection), never with a 500 (bad input is a 400 with llama-server's error shape, a stream's
error an event of it), and it is still up afterwards.

Examples are derandomized (the same every run: a failure is reproducible, never by chance) and few
enough to run in well under a minute on two busy cores; replies are kept to a token or two
(`--max-tokens 1`, a 256-token context)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serving import Served, served

KEY = "fuzz-kéy"
AUTH = {"Authorization": b"Bearer " + KEY.encode()}
FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
ANSWERS = {200, 400, 401, 404, 413, 503}
"""What a request may be answered with (503: the line is full, which a reply may make it)."""


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECTUI_HOME", str(tmp_path_factory.mktemp("home")))
        # one thread: a busy machine stalls llama.cpp's threads at every barrier of a pass
        with served(tiny_pair.target, tiny_pair.draft, "--ctx", "256", "--max-tokens", "1", "--threads", "1",
                    api_key=KEY) as running:
            yield running


@pytest.fixture(scope="module")
def http(server) -> httpx.Client:
    with server.http() as client:
        yield client


# ----- strategies -----------------------------------------------------------------------------------

ODD_TEXT = st.sampled_from(["", "²", "--5", "٣", "-1", "99999999999", "\x1b[31m", "\x00", "root ::= (", "{", "\\",
                            "é" * 40, "^$", "#/$defs/x", "https://example.com/s.json"])
SURROGATES = st.sampled_from(["\ud800", "a\udfffb"])
TEXT = st.one_of(st.text(st.characters(), max_size=24), ODD_TEXT, SURROGATES)  # (no codec: hypothesis would
COUNT = st.one_of(st.integers(-3, 1200), st.sampled_from([10**7, 2**63, -(2**70)]),  # map all of UTF-8 first)
                  st.floats(allow_nan=False), TEXT)
LEAF = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | TEXT
JSON = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                    max_leaves=12)
TYPES = st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null", "nonsense"])
PATTERN = st.builds(lambda body: f"^{body}$", st.text("ab.()[]{}|*+?,0123456789\\-^$", max_size=16)) | TEXT


def _schema(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={
        "type": TYPES | st.lists(TYPES, max_size=3), "items": children, "prefixItems": st.lists(children, max_size=3),
        "properties": st.dictionaries(TEXT, children, max_size=4), "required": st.lists(TEXT, max_size=3),
        "additionalProperties": st.booleans() | children, "anyOf": st.lists(children, max_size=3),
        "oneOf": st.lists(children, max_size=3), "allOf": st.lists(children, max_size=3),
        "enum": st.lists(LEAF, max_size=4), "const": LEAF, "minItems": COUNT, "maxItems": COUNT,
        "minLength": COUNT, "maxLength": COUNT, "pattern": PATTERN, "$ref": TEXT,
        "format": st.sampled_from(["date", "time", "date-time", "uuid", "email", "x"]),
        "$defs": st.dictionaries(TEXT, children, max_size=2)})


SCHEMA = st.recursive(_schema(st.just({})), _schema, max_leaves=8) | JSON
SMALL_INT = st.integers(-3, 4) | st.integers(1 << 24, 1 << 70) | LEAF


def mostly(valid: st.SearchStrategy[Any], times: int = 3) -> st.SearchStrategy[Any]:
    """`valid` `times` in `times + 1`, any JSON value otherwise."""
    return st.one_of(*[valid] * times, LEAF)


BIAS = st.integers(0, 300).map(str) | TEXT, st.floats(-100, 100) | st.just(False) | LEAF
MESSAGE = st.fixed_dictionaries(
    {"role": mostly(st.sampled_from(["user", "system", "developer", "assistant", "tool"]))},
    optional={"content": mostly(TEXT | st.lists(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url"])},
                                                                      optional={"text": TEXT}), max_size=3)),
              "reasoning_content": TEXT})
GRAMMARS = st.sampled_from(['root ::= "yes" | "no"', 'root ::= [0-9]{1,3}', 'root ::= "a"{5,3}', "root ::= (",
                            "root ::= " + "(" * 3000 + '"a"' + ")" * 3000, 'root ::= "\x1b[2J" x', 'root ::= <[3]>'])
FIELDS = {
    "temperature": mostly(st.floats(0, 2)), "top_p": mostly(st.floats(0, 1)), "min_p": mostly(st.floats(0, 1)),
    "top_k": mostly(st.integers(0, 100)), "seed": mostly(st.integers(-1, 2**32 - 1)),
    "max_tokens": mostly(st.integers(-1, 3)), "max_completion_tokens": mostly(st.integers(-1, 3)),
    "n_predict": mostly(st.integers(-1, 3)), "stop": mostly(st.lists(TEXT, max_size=4) | TEXT),
    "k": mostly(st.integers(0, 16) | st.just("auto")),
    "drafter": mostly(st.sampled_from(["model", "ngram", "suffix", "none", "eagle3"])),
    "logit_bias": mostly(st.dictionaries(*BIAS, max_size=4) | st.lists(st.tuples(*BIAS).map(list), max_size=4)),
    "grammar": mostly(GRAMMARS | TEXT), "stream": mostly(st.booleans()),
    "stream_options": mostly(st.fixed_dictionaries({"include_usage": st.booleans()})), "n": mostly(st.just(1)),
    "model": TEXT, "return_tokens": mostly(st.booleans()),
    "chat_template_kwargs": mostly(st.fixed_dictionaries({}, optional={"enable_thinking": st.booleans()})),
    "reasoning_effort": mostly(st.sampled_from(["low", "medium", "high"])), "tools": JSON,
    "logprobs": mostly(st.booleans()), "top_logprobs": mostly(st.integers(0, 20)),
    "response_format": mostly(st.fixed_dictionaries({"type": st.sampled_from(["text", "json_object"])})),
    "continue_final_message": mostly(st.booleans() | st.sampled_from(["content", "reasoning_content", "x"])),
    "add_generation_prompt": mostly(st.booleans()), "return_progress": mostly(st.booleans()),
    "verbose": mostly(st.booleans()),
}
SOME_FIELDS = st.lists(st.sampled_from(sorted(FIELDS)), max_size=5, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({name: FIELDS[name] for name in names}))
SCHEMA_PLACES = st.sampled_from(["json_schema", "response_format", "json_object"])


def with_schema(place: str, schema: object) -> dict[str, Any]:
    if place == "json_schema":
        return {"json_schema": schema}
    if place == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


# ----- what every answer must be ----------------------------------------------------------------------


def answered(http: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """The server answers (no dropped connection) with a status it may give, never a 500; an error
    in llama-server's shape; a stream without an error event of status 500."""
    with http.stream(method, path, **kwargs) as response:
        body = response.read()
    assert response.status_code in ANSWERS, body[:2000]
    if response.status_code >= 400:
        error = json.loads(body)["error"]
        assert error["code"] == response.status_code and error["message"] and error["type"], body[:2000]
    elif response.headers["content-type"].startswith("text/event-stream"):
        assert b'"code": 500' not in body and b'"server_error"' not in body, body[-2000:]
    return response


def post(http: httpx.Client, path: str, body: object) -> httpx.Response:
    return answered(http, "POST", path, content=json.dumps(body).encode(), headers=AUTH)


@settings(FUZZ, max_examples=30)
@given(schema=SCHEMA, place=SCHEMA_PLACES)
def test_any_json_schema_is_answered(http, schema, place) -> None:
    post(http, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                          **with_schema(place, schema)})


@settings(FUZZ, max_examples=60)
@given(messages=mostly(st.lists(MESSAGE, min_size=1, max_size=3), times=7), fields=SOME_FIELDS)
def test_any_chat_body_is_answered(http, messages, fields) -> None:
    post(http, "/v1/chat/completions", {"messages": messages, **fields})


@settings(FUZZ, max_examples=30)
@given(messages=mostly(st.lists(MESSAGE, min_size=1, max_size=3), times=7), fields=SOME_FIELDS,
       path=st.sampled_from(["/apply-template", "/chat/completions/input_tokens"]))
def test_any_chat_body_is_answered_by_the_prompt_utilities(http, messages, fields, path) -> None:
    post(http, path, {"messages": messages, **fields})


TOKEN_IDS = st.lists(st.integers(0, 300) | SMALL_INT, max_size=6)


@settings(FUZZ, max_examples=40)
@given(body=mostly(st.fixed_dictionaries({}, optional={
    "content": mostly(TEXT | st.lists(TEXT | st.integers(0, 300) | SMALL_INT, max_size=4)),
    "add_special": mostly(st.booleans()), "parse_special": mostly(st.booleans()),
    "with_pieces": mostly(st.booleans()), "tokens": mostly(TOKEN_IDS)})),
       path=st.sampled_from(["/tokenize", "/detokenize"]))
def test_any_tokenizer_body_is_answered(http, body, path) -> None:
    post(http, path, body)


@settings(FUZZ, max_examples=40)
@given(prompt=mostly(TEXT | st.lists(st.integers(0, 270) | st.integers(-1, 400), max_size=5)
                    | st.lists(TEXT, max_size=2), times=7),
       fields=SOME_FIELDS, legacy=st.fixed_dictionaries({}, optional={"logprobs": mostly(st.integers(0, 5)),
                                                                      "echo": LEAF, "suffix": LEAF}))
def test_any_completion_body_is_answered(http, prompt, fields, legacy) -> None:
    post(http, "/v1/completions", {"prompt": prompt, **fields, **legacy})


@settings(FUZZ, max_examples=20)
@given(body=st.binary(max_size=64) | JSON.map(lambda value: json.dumps(value).encode()),
       path=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/chat/completions", "/tokenize",
                             "/detokenize", "/apply-template", "/v1/chat/completions/input_tokens"]))
def test_any_bytes_are_answered(http, body, path) -> None:
    answered(http, "POST", path, content=body, headers=AUTH)


HEADER_VALUE = st.binary(max_size=40).map(lambda raw: bytes(b for b in raw if b == 9 or 32 <= b != 127).strip(b" \t")) \
    | st.sampled_from([b"Bearer " + KEY.encode(), b"bearer " + KEY.encode(), KEY.encode("latin-1", "replace")])


@settings(FUZZ, max_examples=20)
@given(name=st.sampled_from(["Authorization", "X-Api-Key", "Content-Type", "Accept", "Transfer-Encoding-Not"]),
       value=HEADER_VALUE, path=st.sampled_from(["/health", "/v1/models", "/metrics", "/v1/chat/completions"]))
def test_any_header_is_answered(http, name, value, path) -> None:
    method = "POST" if path.endswith("completions") else "GET"
    answered(http, method, path, headers={name: value}, json={"messages": [{"role": "user", "content": "hi"}]})


def test_the_server_is_still_up_after_the_fuzzing(http) -> None:
    assert http.get("/health").json() == {"status": "ok"}
    reply = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, headers=AUTH)
    assert reply.is_success and reply.json()["usage"]["completion_tokens"] == 1
