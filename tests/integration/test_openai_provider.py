"""The OpenAI-compatible provider against a real local HTTP server speaking the wire format."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from stockade.llm.base import Message, ModelToolCall, ProviderError, ToolSchema
from stockade.llm.openai import OpenAIConfig, OpenAIProvider, retry_after_seconds
from tests.openai_fake import FakeServer, Reply, completion, fake_openai_server, sse


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with fake_openai_server() as srv:
        yield srv


class Sleeps:
    """Records backoff waits instead of sleeping (keeps the tests quick and exact)."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


TOOLS = [
    ToolSchema(
        "read_file",
        "Read a file.",
        {"type": "object", "properties": {"file_path": {"type": "string"}}},
    )
]
HISTORY = [
    Message("system", "sys"),
    Message("user", "read a.txt"),
    Message(
        "assistant",
        "",
        tool_calls=(ModelToolCall("call_1", "read_file", {"file_path": "a.txt"}),),
    ),
    Message("tool", "hello", tool_call_id="call_1", name="read_file"),
]


def provider(server: FakeServer, sleeps: Sleeps | None = None, **kw: Any) -> OpenAIProvider:
    config = OpenAIConfig(
        base_url=server.url, model="test-model", api_key="sk-test", backoff_base_s=0.01, **kw
    )
    return OpenAIProvider(config, sleep=sleeps or Sleeps())


async def test_tool_calling_round_trip_in_wire_format(server: FakeServer) -> None:
    server.replies.append(
        Reply(
            body=completion(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_9",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"file_path":"b"}'},
                        }
                    ],
                }
            )
        )
    )
    p = provider(server)
    turn = await p.complete(HISTORY, TOOLS)
    await p.aclose()
    assert turn.tool_calls == (ModelToolCall("call_9", "read_file", {"file_path": "b"}),)
    assert (turn.prompt_tokens, turn.completion_tokens) == (11, 7)
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    body = request["body"]
    assert body["model"] == "test-model" and body["tool_choice"] == "auto"
    assert body["tools"][0] == {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": TOOLS[0].parameters,
        },
    }
    assistant, tool = body["messages"][2], body["messages"][3]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "read_file",
        "arguments": '{"file_path":"a.txt"}',
    }
    assert assistant["tool_calls"][0]["type"] == "function" and assistant["content"] is None
    assert tool == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "hello",
    }


async def test_forced_final_answer_sends_no_tools_and_drops_stray_calls(
    server: FakeServer,
) -> None:
    server.replies.append(
        Reply(
            body=completion(
                {
                    "role": "assistant",
                    "content": "final",
                    "tool_calls": [
                        {
                            "id": "x",
                            "type": "function",
                            "function": {"name": "t", "arguments": "{}"},
                        }
                    ],
                }
            )
        )
    )
    p = provider(server)
    turn = await p.complete(HISTORY, TOOLS, allow_tools=False)
    await p.aclose()
    assert turn.text == "final" and turn.tool_calls == ()
    assert "tools" not in server.requests[0]["body"]


async def test_streaming_assembles_text_and_tool_calls_by_index(server: FakeServer) -> None:
    def tc(index: int, **function: str) -> dict[str, Any]:
        call: dict[str, Any] = {"index": index, "function": function}
        if "name" in function:
            call |= {"id": f"call_{index}", "type": "function"}
        return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}

    server.replies.append(
        Reply(
            chunks=[
                b": keep-alive comment\n\n",
                *sse(
                    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Let "}}]},
                    {"choices": [{"index": 0, "delta": {"content": "me look."}}]},
                    tc(0, name="read_file", arguments=""),
                    tc(1, name="grep_files", arguments='{"pat'),
                    tc(0, arguments='{"file_path":'),
                    tc(1, arguments='tern":"x"}'),
                    tc(0, arguments='"a.txt"}'),
                    {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
                    "[DONE]",
                ),
            ]
        )
    )
    p = provider(server, stream=True)
    turn = await p.complete(HISTORY, TOOLS)
    await p.aclose()
    assert turn.text == "Let me look."
    assert turn.tool_calls == (
        ModelToolCall("call_0", "read_file", {"file_path": "a.txt"}),
        ModelToolCall("call_1", "grep_files", {"pattern": "x"}),
    )
    assert (turn.prompt_tokens, turn.completion_tokens) == (5, 3)
    body = server.requests[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_truncated_stream_is_a_clear_error(server: FakeServer) -> None:
    server.replies.append(
        Reply(chunks=sse({"choices": [{"index": 0, "delta": {"content": "partial"}}]}))
    )
    p = provider(server, stream=True)
    with pytest.raises(ProviderError, match="truncated"):
        await p.complete(HISTORY, TOOLS)
    await p.aclose()


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (Reply(body=b'{"choices": [{"message": {"content": "x"'), "not valid JSON"),
        (Reply(body=b"[]"), "not a JSON object"),
        (Reply(body=b'{"choices": []}'), "no choices"),
        (
            Reply(
                body=completion(
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "read_file", "arguments": '{"file_path": '},
                            }
                        ],
                    }
                )
            ),
            "arguments are not valid JSON",
        ),
        (
            Reply(
                body=completion(
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c", "function": {"name": "read_file", "arguments": "[1]"}}
                        ],
                    }
                )
            ),
            "must be a JSON object",
        ),
        (Reply(400, b'{"error": {"message": "bad model name"}}'), "HTTP 400: bad model name"),
        (Reply(401, b"unauthorised"), "HTTP 401: unauthorised"),
        (Reply(chunks=sse("{not json")), "stream chunk is not valid JSON"),
    ],
)
async def test_malformed_answers_raise_at_once(
    server: FakeServer, reply: Reply, match: str
) -> None:
    server.replies.append(reply)
    p = provider(server, stream=reply.chunks is not None)
    with pytest.raises(ProviderError, match=match):
        await p.complete(HISTORY, TOOLS)
    await p.aclose()
    assert len(server.requests) == 1  # not retried


async def test_429_honours_retry_after_then_succeeds(server: FakeServer) -> None:
    server.replies += [
        Reply(429, b'{"error":{"message":"slow down"}}', {"Retry-After": "3"}),
        Reply(503, b"busy"),
        Reply(body=completion({"role": "assistant", "content": "ok"})),
    ]
    sleeps = Sleeps()
    p = provider(server, sleeps)
    turn = await p.complete(HISTORY, TOOLS)
    await p.aclose()
    assert turn.text == "ok"
    assert len(server.requests) == 3
    assert sleeps.delays[0] == 3.0
    assert 0 < sleeps.delays[1] <= 0.02  # exponential backoff without Retry-After


async def test_500s_exhaust_the_retries(server: FakeServer) -> None:
    server.replies += [Reply(500, b'{"error":{"message":"boom"}}') for _ in range(3)]
    sleeps = Sleeps()
    p = provider(server, sleeps, max_retries=2)
    with pytest.raises(ProviderError, match="after 3 attempts: HTTP 500: boom"):
        await p.complete(HISTORY, TOOLS)
    await p.aclose()
    assert len(server.requests) == 3 and len(sleeps.delays) == 2


async def test_connection_errors_are_retried_then_reported() -> None:
    sleeps = Sleeps()
    config = OpenAIConfig(base_url="http://127.0.0.1:1/v1", model="m", max_retries=1)
    p = OpenAIProvider(config, sleep=sleeps)
    with pytest.raises(ProviderError, match="after 2 attempts: connection error"):
        await p.complete(HISTORY, TOOLS)
    await p.aclose()
    assert len(sleeps.delays) == 1


def test_retry_after_parsing() -> None:
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds("-1") == 0.0
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_api_key_is_not_in_the_config_repr() -> None:
    assert "sk-secret" not in repr(OpenAIConfig(base_url="u", model="m", api_key="sk-secret"))


async def test_agent_turn_driven_by_the_http_model(server: FakeServer) -> None:
    """The whole loop with the real provider: the model's tool call runs, its result goes
    back in the next request as a ``tool`` message, and the final text ends the turn."""
    import grpc

    from stockade.agent.convert import event_to_pb
    from stockade.agent.core import AgentCore
    from stockade.client.decision import DecisionClient
    from stockade.client.executor import ExecutorClient
    from stockade.v1 import agent_service_pb2 as a_pb2
    from stockade.v1 import decision_service_pb2_grpc as d_grpc
    from stockade.v1 import executor_service_pb2_grpc as x_grpc
    from tests.unit.agent.conftest import FakeDecision, FakeExecutor, Sink

    server.replies += [
        Reply(
            body=completion(
                {
                    "role": "assistant",
                    "content": "Reading.",
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"file_path":"x"}'},
                        }
                    ],
                }
            )
        ),
        Reply(body=completion({"role": "assistant", "content": "All done."})),
    ]
    grpc_server = grpc.aio.server()
    d_grpc.add_DecisionServiceServicer_to_server(FakeDecision(), grpc_server)  # type: ignore[abstract]
    executor = FakeExecutor()  # type: ignore[abstract]
    x_grpc.add_ExecutorServiceServicer_to_server(executor, grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    await grpc_server.start()
    model = provider(server)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        core = AgentCore(
            decision=DecisionClient(channel),
            executor=ExecutorClient(channel),
            audit=Sink(),
            provider_for=lambda _script: model,
        )
        events = [event_to_pb(e) async for e in core.run_turn("s1", "read x")]
    await model.aclose()
    await grpc_server.stop(None)
    assert events[-1].terminated.reason == a_pb2.TERMINATION_REASON_COMPLETED
    assert [e.final_answer.text for e in events if e.WhichOneof("event") == "final_answer"] == [
        "All done."
    ]
    assert executor.executed[0].call.call_id == "call_a"
    second = server.requests[1]["body"]["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "call_a"
    assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "call_a"
    assert "read_file" in second[-1]["content"]
    offered = {t["function"]["name"] for t in server.requests[0]["body"]["tools"]}
    assert "read_file" in offered and "search_papers" not in offered  # no provider: not offered
