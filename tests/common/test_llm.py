"""Tests for common.llm: OpenAIChat against a real local HTTP server, HFChat, ScriptedChat."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from common.llm import ChatLLM, ChatLLMError, HFChat, OpenAIChat, ScriptedChat

SECRET = "sk-test-SECRET-0123456789"
MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def _ok(content: str) -> tuple[int, dict, bytes]:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
    return 200, {"Content-Type": "application/json"}, json.dumps(body).encode()


class _Server:
    """A chat-completions endpoint on 127.0.0.1 that replays a script of responses."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict, bytes]] = []
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                outer.requests.append(
                    {
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "body": json.loads(self.rfile.read(n)),
                    }
                )
                status, headers, body = outer.script.pop(0) if outer.script else _ok("default")
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = _Server()
    yield s
    s.close()


@pytest.fixture
def client(server, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", SECRET)
    return OpenAIChat(
        "test-model",
        base_url=server.url,
        api_key_env="TEST_LLM_KEY",
        timeout=5,
        max_retries=3,
        backoff=0.01,
        temperature=0.0,
        seed=42,
    )


def test_normal_answer_sends_the_openai_request(server, client):
    server.script.append(_ok("hello back"))
    assert client.chat(MSGS) == "hello back"
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == f"Bearer {SECRET}"
    assert req["body"]["model"] == "test-model"
    assert req["body"]["messages"] == MSGS
    assert req["body"]["temperature"] == 0.0 and req["body"]["seed"] == 42
    assert isinstance(client, ChatLLM)


def test_429_then_success_retries_with_backoff(server, client, monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr("common.llm.time.sleep", sleeps.append)
    server.script += [
        (429, {"Content-Type": "application/json"}, b'{"error": "rate limited"}'),
        (503, {}, b"overloaded"),
        _ok("finally"),
    ]
    assert client.chat(MSGS) == "finally"
    assert len(server.requests) == 3
    assert sleeps == pytest.approx([0.01, 0.02])  # exponential: backoff * 2**attempt


def test_retry_after_header_is_honoured_and_capped(server, monkeypatch):
    sleeps: list[float] = []
    monkeypatch.setattr("common.llm.time.sleep", sleeps.append)
    c = OpenAIChat("m", base_url=server.url, backoff=0.01, max_backoff=2.0, max_retries=1)
    server.script += [(429, {"Retry-After": "30"}, b"slow down"), _ok("ok")]
    assert c.chat(MSGS) == "ok"
    assert sleeps == [2.0]


def test_retries_exhausted_raise_with_the_last_error(server, client, monkeypatch):
    monkeypatch.setattr("common.llm.time.sleep", lambda s: None)
    server.script += [(500, {}, b"boom")] * 4
    with pytest.raises(ChatLLMError, match=r"after 4 attempts.*HTTP 500"):
        client.chat(MSGS)
    assert len(server.requests) == 4


def test_client_error_is_not_retried(server, client):
    server.script.append((400, {}, b'{"error": "bad request"}'))
    with pytest.raises(ChatLLMError, match="HTTP 400"):
        client.chat(MSGS)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "body",
    [b"not json at all", b'{"choices": []}', b'{"result": "x"}', b'{"choices": [{"message": 5}]}'],
)
def test_malformed_body_raises_a_clear_error(server, client, body):
    server.script.append((200, {"Content-Type": "application/json"}, body))
    with pytest.raises(ChatLLMError, match="malformed chat-completions response"):
        client.chat(MSGS)


def test_key_never_appears_in_repr_logs_or_errors(server, client, monkeypatch, caplog):
    monkeypatch.setattr("common.llm.time.sleep", lambda s: None)
    caplog.set_level(logging.DEBUG)
    # The server echoes the key back in error bodies: the client must redact it.
    echo = f'{{"error": "invalid key {SECRET}"}}'.encode()
    server.script += [(503, {}, echo)] * 4 + [(401, {}, echo), (200, {}, echo)]
    errors = []
    for _ in range(3):
        with pytest.raises(ChatLLMError) as exc:
            client.chat(MSGS)
        errors.append(str(exc.value))
    assert all(SECRET not in e for e in errors)
    assert "***" in errors[0]
    assert SECRET not in caplog.text and caplog.text  # retries were logged, without the key
    assert SECRET not in repr(client) and "TEST_LLM_KEY" in repr(client)
    assert SECRET not in str(vars(client))


def test_timeout_is_retried_then_reported(monkeypatch):
    import socket

    monkeypatch.setattr("common.llm.time.sleep", lambda s: None)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(5)  # accepts connections but never answers
    try:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        c = OpenAIChat("m", base_url=url, timeout=0.2, max_retries=1)
        with pytest.raises(ChatLLMError, match="after 2 attempts"):
            c.chat(MSGS)
        assert c.n_requests == 2
    finally:
        sock.close()


def test_chat_batch_keeps_order(server, client):
    server.script.clear()
    out = client.chat_batch([[{"role": "user", "content": str(i)}] for i in range(5)])
    assert out == ["default"] * 5 and len(server.requests) == 5


def test_no_key_sends_no_auth_header(server, monkeypatch):
    monkeypatch.delenv("UNSET_KEY_VAR", raising=False)
    c = OpenAIChat("m", base_url=server.url, api_key_env="UNSET_KEY_VAR")
    server.script.append(_ok("x"))
    assert c.chat(MSGS) == "x"
    assert server.requests[0]["auth"] is None


def test_bad_arguments_and_messages():
    with pytest.raises(ValueError, match="model"):
        OpenAIChat("")
    with pytest.raises(ValueError, match="timeout"):
        OpenAIChat("m", timeout=0)
    with pytest.raises(ValueError, match="max_retries"):
        OpenAIChat("m", max_retries=-1)
    c = ScriptedChat(["a"])
    with pytest.raises(TypeError, match="messages"):
        c.chat("just a string")
    with pytest.raises(ValueError, match="at least one"):
        c.chat([])
    with pytest.raises(ValueError, match=r"messages\[0\]"):
        c.chat([{"content": "no role"}])
    with pytest.raises(TypeError, match="responses"):
        ScriptedChat("abc")


def test_scripted_chat_replays_and_records():
    c = ScriptedChat(["one", "two"])
    assert c.chat_batch([MSGS, [{"role": "user", "content": "q"}]]) == ["one", "two"]
    assert c.calls[0] == MSGS and c.calls[1][0]["content"] == "q"
    with pytest.raises(ChatLLMError, match="ran out"):
        c.chat(MSGS)
    f = ScriptedChat(lambda m: m[-1]["content"].upper())
    assert f.chat(MSGS) == "HI" and len(f.calls) == 1
    # Recorded calls are copies: mutating the caller's list afterwards changes nothing.
    msgs = [{"role": "user", "content": "x"}]
    f.chat(msgs)
    msgs[0]["content"] = "changed"
    assert f.calls[-1][0]["content"] == "x"


def test_hf_chat_is_greedy_and_matches_generator(tiny_qwen2):
    from common.generation import HFGenerator, SamplingParams

    model, tok = tiny_qwen2
    chat = HFChat(model, tok, max_new_tokens=6)
    assert isinstance(chat, ChatLLM)
    a = chat.chat(MSGS)
    assert a == chat.chat(MSGS)  # greedy: deterministic
    ref = HFGenerator(model, tok).generate([MSGS], params=SamplingParams(6, temperature=0.0))
    assert a == ref[0][0].text
    assert chat.chat_batch([MSGS, MSGS]) == [a, a]


def test_vllm_chat_is_lazy_and_names_the_extra():
    """VLLMChat imports vllm only when built; without it the error names the install extra."""
    import importlib.util

    from common.llm import VLLMChat

    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ImportError, match=r"icml26\[vllm\]"):
            VLLMChat("Qwen/Qwen2.5-0.5B-Instruct")


def test_openai_chat_base_url_from_the_environment(monkeypatch):
    from common.llm import OpenAIChat

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert OpenAIChat("m").base_url == "https://api.openai.com/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/")
    assert OpenAIChat("m").base_url == "http://127.0.0.1:9/v1"
    assert OpenAIChat("m", base_url="http://h/v1").base_url == "http://h/v1"  # explicit wins
