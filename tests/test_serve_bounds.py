"""`spectui serve` against hostile requests (issue #36): bounds on what one request may make the
server build or hold, each a 400 naming its limit before the work starts; input that used to
be a 500 (bias keys, lone surrogates, JSON Python reads but JSON does not); what was silently
wrong (max_tokens 0, a non-ASCII API key, `bearer` in lower case, /health while loading, a
reply cut inside a character); and the race that made a 400 a 503 now and then."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
import tiny_gguf
from serving import Served, served, served_at_home

from spectui import limits
from spectui.cli import build_parser
from spectui.serve import slot as slot_module
from spectui.serve.command import bind, build_server, load_in_background, prepare

HI = [{"role": "user", "content": "hi"}]
BYTE_E2 = len(tiny_gguf.SPECIAL_TOKENS) + 0xE2
"""The tiny vocabulary's token for the byte 0xE2, which begins '€' (and most other symbols)."""


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, tiny_pair.target, tiny_pair.draft, "--ctx", "256") as running:
        yield running


def error_of(response: httpx.Response, status: int = 400, kind: str = "invalid_request_error") -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["type"]) == (status, kind) and error["message"]
    return error["message"]


def still_up(server: Served) -> None:
    with server.http() as http:
        assert http.get("/health").json() == {"status": "ok"}
        assert http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 2}).is_success


# ----- bounds on what a request makes the server build ----------------------------------------------

HUGE = 10_000_000
ARRAY = {"type": "array", "items": {"type": "integer"}, "maxItems": HUGE}
NESTED: list[object] = []
for _ in range(limits.MAX_JSON_DEPTH):
    NESTED = [NESTED]


@pytest.mark.parametrize(("fields", "said"), [
    ({"json_schema": ARRAY}, "json_schema.maxItems = 10,000,000: over 1,000"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": ARRAY}}},
     "response_format.json_schema.schema.maxItems"),
    ({"response_format": {"type": "json_object", "schema": {"type": "object", "properties": {"a": ARRAY}}}},
     "response_format.schema.properties.a.maxItems"),
    ({"json_schema": {"type": "string", "minLength": HUGE}}, "minLength"),
    ({"json_schema": {"type": "string", "pattern": "^a{0,10000000}$"}}, "MAX_SCHEMA_REPEAT"),
    ({"json_schema": {"type": "string", "pattern": "^" + "a" * 2000 + "$"}}, "MAX_SCHEMA_PATTERN_CHARS"),
    ({"json_schema": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(300)}}},
     "MAX_SCHEMA_PROPERTIES"),
    ({"json_schema": {"enum": list(range(2000))}}, "MAX_SCHEMA_ENTRIES"),
    ({"grammar": "root ::= " + "(" * 150_000 + '"a"' + ")" * 150_000}, "MAX_GRAMMAR_CHARS"),
    ({"grammar": "root ::= " + "(" * 5000 + '"a"' + ")" * 5000}, "MAX_GRAMMAR_DEPTH"),
    ({"grammar": 'root ::= "a"{0,5000}'}, "MAX_GRAMMAR_REPEAT"),
    ({"grammar": 'root ::= "a"{5,3}'}, "upper bound below"),
    ({"grammar": "root ::= " + ' "a"{0,2000}' * 20}, "MAX_GRAMMAR_RULES"),
    ({"grammar": "root ::= " + ' "abcdefghijklmnopqrstuvwxyz"{2000}' * 50}, "MAX_GRAMMAR_ELEMENTS"),
    ({"stop": [f"s{i}" for i in range(17)]}, "MAX_STOP_STRINGS"),
    ({"stop": "x" * 300}, "MAX_STOP_CHARS"),
    ({"logit_bias": {str(i): 1 for i in range(1025)}}, "MAX_LOGIT_BIAS"),
    ({"logit_bias": {"word " * 60: 1}}, "MAX_LOGIT_BIAS_TEXT"),
    ({"chat_template_kwargs": {"x": NESTED}}, "MAX_JSON_DEPTH"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_what_a_request_would_make_the_server_build_is_bounded_and_named(server, fields, said) -> None:
    """maxItems 10,000,000 used to end the process (the converter nests a group per optional item
    and llama.cpp's parser recursed past the C stack); each bound is a 400 that names it."""
    with server.http() as http:
        message = error_of(http.post("/v1/chat/completions", json={"messages": HI, **fields}))
    assert said in message
    still_up(server)


def test_a_grammar_at_the_bounds_still_compiles_and_constrains_the_reply(server) -> None:
    schema = {"type": "array", "items": {"type": "integer"}, "maxItems": limits.MAX_SCHEMA_REPEAT}
    with server.http() as http:
        reply = http.post("/v1/chat/completions", json={"messages": HI, "json_schema": schema, "max_tokens": 6,
                                                        "temperature": 0})
    assert reply.is_success, reply.text
    assert reply.json()["choices"][0]["message"]["content"].startswith("[")


def test_prompts_messages_and_bodies_past_their_bounds(server) -> None:
    n_ctx = 256
    chars = n_ctx * limits.MAX_PROMPT_CHARS_PER_TOKEN + 1
    with server.http() as http:
        long = [{"role": "user", "content": "x" * chars}]
        said = error_of(http.post("/v1/chat/completions", json={"messages": long}))
        assert "MAX_PROMPT_CHARS_PER_TOKEN" in said and "256-token context" in said
        assert "MAX_PROMPT_CHARS_PER_TOKEN" in error_of(http.post("/v1/completions", json={"prompt": "x" * chars}))
        many = [{"role": "user", "content": ""}] * (limits.MAX_MESSAGES + 1)
        assert "MAX_MESSAGES" in error_of(http.post("/v1/chat/completions", json={"messages": many}))
        lists = {"messages": HI, "metadata": [[] for _ in range(limits.MAX_JSON_CONTAINERS + 1)]}
        assert "MAX_JSON_CONTAINERS" in error_of(http.post("/v1/chat/completions", json=lists))
        # deeper than Python's json recursion: was a RecursionError, a 500
        deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        assert "MAX_JSON_DEPTH" in error_of(http.post("/v1/chat/completions", content=deep))
    still_up(server)


@pytest.mark.parametrize("body", [
    b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
    b'{"messages": [{"role": "user", "content": "hi"}], "top_p": -Infinity}',
    b'{"messages": [{"role": "user", "content": "hi"}], "seed": ' + b"9" * 5000 + b"}",
], ids=["NaN", "-Infinity", "5000 digits"])
def test_json_that_python_reads_but_json_does_not_is_a_400(server, body) -> None:
    with server.http() as http:
        assert "not valid JSON" in error_of(http.post("/v1/chat/completions", content=body))


# ----- 500s that were bad input ---------------------------------------------------------------------


def test_bias_keys_that_are_not_ascii_digits_are_texts_as_llama_server_reads_them(server) -> None:
    """"²" passed str.isdigit and then failed int(); "--5" passed lstrip("-"): both were 500s."""
    with server.http() as http:
        for key in ("²", "--5", "٣", "+5", " 5"):
            reply = http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 2, "logit_bias": {key: -5}})
            assert reply.is_success, (key, reply.text)
        assert "not in the model's vocabulary" in error_of(
            http.post("/v1/chat/completions", json={"messages": HI, "logit_bias": {"-5": 1}}))


@pytest.mark.parametrize(("route", "body"), [
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}'),
    ("/v1/completions", b'{"prompt": "\\ud800"}'),
    ("/v1/completions", b'{"prompt": ["\\ud800"]}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"\\ud800": 1}}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "stop": ["\\udc00"]}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "model": "\\ud800"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= \\"\\ud800\\""}'),
], ids=["message", "part", "prompt", "prompt list", "bias key", "stop", "model", "grammar"])
def test_a_lone_surrogate_anywhere_is_a_400(server, route, body) -> None:
    with server.http() as http:
        assert "lone surrogate" in error_of(http.post(route, content=body))


# ----- silently wrong -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens", "n_predict"])
def test_max_tokens_0_is_refused_not_a_reply_to_a_full_context(server, name) -> None:
    with server.http() as http:
        assert f"{name} = 0 asks for no tokens" in error_of(
            http.post("/v1/chat/completions", json={"messages": HI, name: 0}))
        assert "asks for no tokens" in error_of(http.post("/v1/completions", json={"prompt": "hi", name: 0}))


def test_a_reply_cut_inside_a_character_leaves_the_character_out(server) -> None:
    """The bias makes the one token the byte 0xE2, which only begins a character: the reply is
    empty, as llama-server's, where it used to end in U+FFFD, streamed or not."""
    body = {"prompt": "in the", "max_tokens": 1, "temperature": 0, "logit_bias": {str(BYTE_E2): 100},
            "return_tokens": True}
    with server.http() as http:
        reply = http.post("/v1/completions", json=body).json()
        assert reply["tokens"] == [BYTE_E2] and reply["choices"][0]["finish_reason"] == "length"
        assert reply["choices"][0]["text"] == ""
        with http.stream("POST", "/v1/completions", json={**body, "stream": True}) as stream:
            streamed = stream.read().decode()
        chat = http.post("/v1/chat/completions", json={**body, "messages": HI}).json()
    assert "\\ufffd" not in streamed and "\ufffd" not in streamed and '"finish_reason": "length"' in streamed
    assert chat["choices"][0]["message"]["content"] == ""


def test_an_api_key_beyond_ascii_and_the_bearer_scheme_in_any_case(tiny_pair, tmp_path, monkeypatch) -> None:
    """Starlette reads a header as Latin-1, the key was compared as UTF-8: 'clé' never matched."""
    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    key = "clé-ключ-🔑"
    body = {"messages": HI, "max_tokens": 2}
    with served(tiny_pair.target, None, api_key=key) as locked, locked.http() as http:
        for scheme in (b"Bearer ", b"bearer ", b"BEARER  ", b""):
            headers = {"Authorization": scheme + key.encode()}
            assert http.post("/v1/chat/completions", json=body, headers=headers).is_success, scheme
        assert http.post("/v1/chat/completions", json=body, headers={"X-Api-Key": key.encode()}).is_success
        for wrong in (key.encode("latin-1", "replace"), b"Bearer " + key.encode()[:-1], b"Basic " + key.encode()):
            assert error_of(http.post("/v1/chat/completions", json=body, headers={"Authorization": wrong}), 401,
                            "authentication_error") == "Invalid API Key"


def test_health_answers_503_loading_model_while_the_models_load(tiny_pair, tmp_path, monkeypatch) -> None:
    """The socket listened during the load and said nothing until it ended; llama-server answers
    503 "Loading model" on every route, and so does spectui now."""
    from spectui.engine import generator

    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    release = threading.Event()
    real = generator.load_generator

    def held(*args, **kwargs):  # type: ignore[no-untyped-def]
        assert release.wait(60), "the test never let the load go on"
        return real(*args, **kwargs)

    monkeypatch.setattr(generator, "load_generator", held)
    args = build_parser().parse_args(["serve", "--target", str(tiny_pair.target), "--port", "0", "--no-warm-up",
                                      "--threads", "2"])
    sock = bind(args.host, args.port)
    loading = prepare(args, None)
    server = build_server(args, loading)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    host, port = sock.getsockname()[:2]
    try:
        while not server.started:
            time.sleep(0.01)
        loader = load_in_background(loading, server)
        with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as http:
            for response in (http.get("/health"), http.get("/v1/health"), http.get("/v1/models"),
                             http.post("/v1/chat/completions", json={"messages": HI})):
                assert error_of(response, 503, "unavailable_error") == "Loading model"
            release.set()
            loader.join(60)
            assert loading.error is None
            assert http.get("/health").json() == {"status": "ok"}
            assert http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 2}).is_success
    finally:
        release.set()
        server.should_exit = True
        thread.join(60)
        sock.close()


# ----- the flaky 400 --------------------------------------------------------------------------------


def test_a_client_that_asks_again_at_once_finds_the_slot_free(tiny_pair, tmp_path, monkeypatch) -> None:
    """tests/test_serve_faults.py::test_bad_completion_requests_get_one_clear_400 failed now and
    then: with --max-waiting 0, the engine thread told the client its 400 (or its reply) before
    it freed the slot, and a client quick enough to send the next request in between got 503
    busy. The engine thread is made slow right after it speaks: the slot must be free by then."""
    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    post = slot_module.Job.post

    def post_then_dawdle(job: slot_module.Job, item) -> None:  # type: ignore[no-untyped-def]
        post(job, item)
        if item is not None and any(isinstance(e, slot_module.Failed | slot_module.ReplyDone) for e in item):
            time.sleep(0.3)  # the engine thread is slow to go on, as a busy machine makes it

    monkeypatch.setattr(slot_module.Job, "post", post_then_dawdle)
    with served(tiny_pair.target, None, "--max-waiting", "0") as running, running.http() as http:
        for body in ({"prompt": ""}, {"prompt": [7, 99999]}, {"prompt": "x", "drafter": "eagle"}):
            assert error_of(http.post("/v1/completions", json=body))
        for _ in range(2):
            assert http.post("/v1/completions", json={"prompt": "x", "max_tokens": 2}).is_success
