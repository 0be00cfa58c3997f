"""`spectui serve` under bad input and load, over raw HTTP (httpx): OpenAI's error shape with
llama-server's types, the API key, one reply at a time with a bounded queue, and a client that
hangs up mid-reply."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
from serving import Served, served, served_at_home

from spectui.session.reply import ReplyDone

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, tiny_pair.target, tiny_pair.draft, "--ctx", "256", "--max-waiting", "0") as running:
        yield running


@pytest.fixture(scope="module")
def roomy(tiny_pair, tmp_path_factory: pytest.TempPathFactory) -> Served:
    """A 4096-token context (a 4000-token reply outlasts any hang-up) and two places in line."""
    home = tmp_path_factory.mktemp("home")
    with served_at_home(home, tiny_pair.target, tiny_pair.draft, "--max-waiting", "2") as running:
        yield running


def error_of(response: httpx.Response, status: int, kind: str = "invalid_request_error") -> str:
    """The response is OpenAI's error shape with this status and type; its message."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error["type"]) == (status, kind) and error["message"]
    return error["message"]


@pytest.mark.parametrize(("body", "said"), [
    ({"messages": []}, "messages is empty"),
    ({}, "messages: Field required"),
    ({"messages": HI, "n": 99}, "ask for 1 to 8 choices"),
    ({"messages": HI, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"messages": HI, "temperature": "hot"}, "temperature"),
    ({"messages": HI, "temperature": -1}, "temperature"),
    ({"messages": HI, "max_tokens": 1.5}, "max_tokens"),
    ({"messages": HI, "presence_penalty": 0.5}, "presence_penalty is not supported"),
    ({"messages": [{"role": "robot", "content": "42"}]}, "use system, developer, user, assistant or tool"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "text only"),
    ({"messages": HI, "logit_bias": {"99999": 5}}, "not in the model's vocabulary"),
    ({"messages": HI, "logit_bias": {"12": "up"}}, "logit_bias"),
    ({"messages": HI, "grammar": "root ::= ("}, "not valid GBNF"),
    ({"messages": HI, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "nonsense"}}}},
     "cannot be turned into a grammar"),
    ({"messages": HI, "response_format": {"type": "json_object"}, "grammar": "root ::= \"x\""}, "give one of them"),
    ({"messages": HI, "drafter": "eagle"}, "drafter 'eagle' is not loaded"),
    ({"messages": HI, "k": 99}, "k"),
    ({"messages": HI, "top_logprobs": 2}, "top_logprobs requires logprobs"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_bad_chat_requests_get_one_clear_400(server, body, said) -> None:
    with server.http() as http:
        assert said in error_of(http.post("/v1/chat/completions", json=body), 400)


def test_a_bad_grammar_is_a_400_even_when_streamed(server) -> None:
    with server.http() as http:
        response = http.post("/v1/chat/completions", json={"messages": HI, "grammar": "root ::= (", "stream": True})
    assert "not valid GBNF" in error_of(response, 400)


def test_bad_completion_requests_get_one_clear_400(server) -> None:
    with server.http() as http:
        for body, said in [({"prompt": ["a", "b"]}, "2 prompts"), ({"prompt": "x", "echo": True}, "echo"),
                           ({"prompt": "x", "suffix": "y"}, "suffix"), ({"prompt": ""}, "prompt is empty"),
                           ({"prompt": [7, 99999]}, "token ids must be")]:
            assert said in error_of(http.post("/v1/completions", json=body), 400)


def test_malformed_json_unknown_routes_and_methods(server) -> None:
    with server.http() as http:
        assert "not valid JSON" in error_of(http.post("/v1/chat/completions", content=b"{not json"), 400)
        assert "JSON object" in error_of(http.post("/v1/chat/completions", json=[1, 2]), 400)
        assert "no route" in error_of(http.get("/v1/nowhere"), 404, "not_found_error")
        assert "not allowed" in error_of(http.get("/v1/chat/completions"), 405)


def test_an_oversized_body_is_refused_before_it_is_read(server) -> None:
    big = b'{"messages": [{"role": "user", "content": "' + b"x" * (server.state.max_body + 1) + b'"}]}'
    with server.http() as http:
        assert "most this server reads" in error_of(http.post("/v1/chat/completions", content=big), 413)


def test_a_prompt_over_the_context_is_llama_servers_exceed_context_size_error(server) -> None:
    with server.http() as http:
        response = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "word " * 400}]})
    error_of(response, 400, "exceed_context_size_error")
    error = response.json()["error"]
    assert error["n_ctx"] == 256 and error["n_prompt_tokens"] > 256


def test_any_model_name_is_answered_unless_strict(server, tiny_pair, tmp_path, monkeypatch) -> None:
    with server.http() as http:
        assert http.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": HI, "max_tokens": 2}).is_success
    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    with served(tiny_pair.target, None, "--strict-model", "--alias", "tiny") as strict, strict.http() as http:
        said = error_of(http.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": HI}), 404,
                        "not_found_error")
        assert "'tiny'" in said
        for name in ("tiny", "target", "target.gguf"):
            assert http.post("/v1/chat/completions", json={"model": name, "messages": HI, "max_tokens": 2}).is_success


def test_an_api_key_is_required_but_health_stays_public(tiny_pair, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SPECTUI_HOME", str(tmp_path / "home"))
    body = {"messages": HI, "max_tokens": 2}
    with served(tiny_pair.target, None, api_key="s3cret") as locked, locked.http() as http:
        assert http.get("/health").json() == {"status": "ok"}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cre"}):
            assert error_of(http.post("/v1/chat/completions", json=body, headers=headers), 401,
                            "authentication_error") == "Invalid API Key"
        assert error_of(http.get("/v1/models"), 401, "authentication_error")
        assert error_of(http.get("/metrics"), 401, "authentication_error")
        assert http.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer s3cret"}).is_success
        assert http.post("/v1/chat/completions", json=body, headers={"X-Api-Key": "s3cret"}).is_success
        assert locked.client().chat.completions.create(model="x", messages=HI, max_tokens=2).choices


# ----- load and hang-ups -------------------------------------------------------------------------


def finished_replies(server: Served) -> list[ReplyDone]:
    """Record every reply the engine finishes from now on."""
    seen: list[ReplyDone] = []
    previous = server.state.slot.on_done

    def record(done: ReplyDone) -> None:
        seen.append(done)
        if previous is not None:
            previous(done)

    server.state.slot.on_done = record
    return seen


def wait_for(condition, what: str, seconds: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def long_stream(server: Served, http: httpx.Client):  # type: ignore[no-untyped-def]
    return http.stream("POST", "/v1/chat/completions", json={
        "messages": HI, "max_tokens": 200, "temperature": 0, "stream": True, "k": 0})


def test_a_second_request_while_one_replies_gets_503_with_retry_after(server) -> None:
    """--max-waiting 0: one reply at a time and nobody waits."""
    seen = finished_replies(server)
    with server.http() as http, long_stream(server, http) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("data: ")  # the reply is under way
        busy = http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 2})
        assert "busy" in error_of(busy, 503, "unavailable_error")
        assert int(busy.headers["Retry-After"]) >= 1
        rest = list(lines)
    assert rest[-2:] == ["data: [DONE]", ""] or rest[-1] == "data: [DONE]"
    wait_for(lambda: seen, "the first reply's end")
    with server.http() as http:
        assert http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 2}).is_success


def test_a_client_that_hangs_up_mid_stream_stops_its_reply_and_frees_the_slot(roomy) -> None:
    server = roomy
    seen = finished_replies(server)
    with server.http() as http, http.stream("POST", "/v1/chat/completions", json={
            "messages": HI, "max_tokens": 4000, "temperature": 0, "stream": True}) as stream:
        lines = stream.iter_lines()
        for _ in range(3):
            next(lines)  # a few chunks in, then the client goes away
    wait_for(lambda: seen, "the cancelled reply's end")
    [done] = seen
    assert done.reason == "cancelled" and done.figures.tokens < 4000
    with server.http() as http:
        assert http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 2}).is_success


def test_a_client_that_hangs_up_before_a_whole_reply_stops_it_too(roomy) -> None:
    server = roomy
    seen = finished_replies(server)
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps({"messages": HI, "max_tokens": 4000, "temperature": 0}).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.05)  # the reply starts
    wait_for(lambda: seen, "the reply's end")
    assert seen[0].reason == "cancelled" and seen[0].figures.tokens < 4000


def test_replies_wait_in_line_and_a_third_waiting_is_refused(roomy) -> None:
    seen = finished_replies(roomy)
    results: list[int] = []

    def ask() -> None:
        with roomy.http() as http:
            results.append(http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 30}).status_code)

    with roomy.http() as http, long_stream(roomy, http) as stream:
        lines = stream.iter_lines()
        next(lines)
        waiting = [threading.Thread(target=ask) for _ in range(2)]
        for thread in waiting:
            thread.start()
        wait_for(lambda: roomy.state.slot.waiting == 2, "two requests in line")
        assert "busy" in error_of(http.post("/v1/chat/completions", json={"messages": HI}), 503, "unavailable_error")
        list(lines)
    for thread in waiting:
        thread.join(30)
    assert results == [200, 200] and len(seen) == 3


def test_the_utilities_answer_while_a_reply_runs_not_behind_it(roomy) -> None:
    """/tokenize and /apply-template run on the engine thread between two cycles of the running
    reply: answered while it still runs (a 4000-token reply, stopped by hanging up after)."""
    seen = finished_replies(roomy)
    with roomy.http() as http, http.stream("POST", "/v1/chat/completions", json={
            "messages": HI, "max_tokens": 4000, "temperature": 0, "stream": True}) as stream:
        lines = stream.iter_lines()
        next(lines)  # the reply is under way
        tokens = http.post("/tokenize", json={"content": "gears"}).json()["tokens"]
        prompt = http.post("/apply-template", json={"messages": HI}).json()["prompt"]
        assert not seen and roomy.state.slot.running == 1  # the reply had not ended
    assert "assistant" in prompt
    with roomy.http() as http:
        assert http.post("/detokenize", json={"tokens": tokens}).json() == {"content": "gears"}
    wait_for(lambda: seen, "the cancelled reply's end")
    assert seen[0].reason == "cancelled"


def test_a_waiting_client_that_leaves_never_starts_its_reply(roomy) -> None:
    seen = finished_replies(roomy)
    host, port = roomy.url.removeprefix("http://").split(":")
    body = json.dumps({"messages": HI, "max_tokens": 30}).encode()
    with roomy.http() as http, long_stream(roomy, http) as stream:
        lines = stream.iter_lines()
        next(lines)
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            wait_for(lambda: roomy.state.slot.waiting == 1, "the request in line")
        list(lines)
    wait_for(lambda: roomy.state.slot.waiting == 0 and roomy.state.slot.running == 0, "the line to empty")
    assert [done.figures.tokens for done in seen] == [200]  # only the stream's reply ran


def test_a_request_without_max_tokens_runs_until_the_end_token_or_a_full_context(server) -> None:
    with server.http() as http:
        reply = http.post("/v1/chat/completions", json={"messages": HI, "temperature": 0}).json()
    usage = reply["usage"]
    assert reply["choices"][0]["finish_reason"] in ("stop", "length")
    # the context (--ctx 256) is the limit; the last token is never decoded, so it needs no room
    assert usage["completion_tokens"] > 16 and usage["total_tokens"] <= 256 + 1
