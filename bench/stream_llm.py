#!/usr/bin/env python3
"""stream_llm.py — a fake OpenAI chat-completions server that streams its replies, for
bench/stream-rss.sh: every request is answered with server-sent events whose text adds up to
N bytes, N read from the request's model name `stream-bytes-N` (any other model: "Done.").

Two-step mode, model `stream-bytes-N-tool`: the reply of N bytes of text also calls a tool
(`bench_probe`, which the task does not offer: the host answers with an error result), so the
task goes on and makes a second request, which carries the N-byte assistant message in its
history; a request whose last message is a tool result is answered "Done.".

The text is sent in events of 1,000 characters (`choices[0].delta.content`), then a
`finish_reason: stop` chunk, the usage chunk (`stream_options.include_usage`) and
`data: [DONE]`; the body is delimited by closing the connection. The reply is generated as it
is sent (the server never holds it whole).

The same replies are served in the other builtin formats' streams, by the request's path:
`/v1/messages` (Anthropic Messages: `message_start`, a text block of `text_delta`s, a
`tool_use` block in two-step mode, `message_delta`, `message_stop`; a request whose last
user turn holds a `tool_result` is answered "Done.") and `/v1/responses` (OpenAI Responses:
`response.output_item.added`, `response.output_text.delta`s, a `function_call` item in
two-step mode, `response.completed`; a request whose input ends with a
`function_call_output` is answered "Done."). The Responses stream here carries the text in
its deltas only (the API also repeats it in `output_item.done` and `response.completed`):
what is measured is the step after the reply, not the fold of this one.

Usage: stream_llm.py PORT_FILE LOG_FILE
  Listens on 127.0.0.1 on a free port and writes the port to PORT_FILE (atomically). Appends
  one line per request to LOG_FILE: path, model, bytes of text sent, bytes of body sent.
"""

import http.server, json, os, sys

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
PIECE = 1000
# Printable ASCII that needs no JSON escape, varied so nothing compresses it to nothing.
WORDS = "stream the reply to disk and fold it line by line so memory stays flat ".encode()


def chunk(delta, finish=None):
    return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0,
            "model": "bench", "choices": [{"index": 0, "delta": delta,
                                           "finish_reason": finish}]}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        req = json.loads(body or b"{}")
        model = str(req.get("model", ""))
        two_step = model.endswith("-tool")
        spec = model[:-len("-tool")] if two_step else model
        size = int(spec[len("stream-bytes-"):]) if spec.startswith("stream-bytes-") else 0
        if two_step and answered(self.path, req):
            size, two_step = 0, False
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        sent = 0

        def event(obj):
            nonlocal sent
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            self.wfile.write(data)
            sent += len(data)

        if self.path.endswith("/v1/messages"):
            text = anthropic(event, size, two_step)
        elif self.path.endswith("/v1/responses"):
            text = responses(event, size, two_step)
        else:
            text = chat(event, size, two_step)
        self.wfile.flush()
        self.close_connection = True
        with open(LOG_FILE, "a") as log:
            log.write(f"{self.path} {model} {text} {sent}\n")

    def log_message(self, *args):
        pass


def answered(path, req):
    """Whether the request's last turn answers the reply's tool call (two-step mode)."""
    if path.endswith("/v1/messages"):
        last = (req.get("messages") or [{}])[-1]
        content = last.get("content")
        return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)
    if path.endswith("/v1/responses"):
        items = req.get("input") or [{}]
        return items[-1].get("type") == "function_call_output"
    return (req.get("messages") or [{}])[-1].get("role") == "tool"


def pieces(size):
    """The reply's text in pieces of PIECE characters ("Done." when size is 0)."""
    if size == 0:
        yield "Done."
        return
    text = i = 0
    while text < size:
        n = min(PIECE, size - text)
        yield bytes(WORDS[(i + k) % len(WORDS)] for k in range(n)).decode()
        text += n
        i += n


def anthropic(event, size, two_step):
    """An Anthropic Messages stream; returns the bytes of text sent."""
    event({"type": "message_start", "message": {"id": "msg_bench", "type": "message",
           "role": "assistant", "content": [], "model": "bench", "stop_reason": None,
           "usage": {"input_tokens": 10, "output_tokens": 1}}})
    event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    text = 0
    for piece in pieces(size):
        event({"type": "content_block_delta", "index": 0,
               "delta": {"type": "text_delta", "text": piece}})
        text += len(piece)
    event({"type": "content_block_stop", "index": 0})
    if two_step:
        event({"type": "content_block_start", "index": 1, "content_block": {
            "type": "tool_use", "id": "toolu_bench", "name": "bench_probe", "input": {}}})
        event({"type": "content_block_delta", "index": 1,
               "delta": {"type": "input_json_delta", "partial_json": "{}"}})
        event({"type": "content_block_stop", "index": 1})
    event({"type": "message_delta", "delta": {"stop_reason": "tool_use" if two_step else "end_turn",
           "stop_sequence": None}, "usage": {"output_tokens": max(1, text // 4)}})
    event({"type": "message_stop"})
    return text


def responses(event, size, two_step):
    """An OpenAI Responses stream (text in deltas only); returns the bytes of text sent."""
    event({"type": "response.created", "response": {"id": "resp_bench", "status": "in_progress"}})
    event({"type": "response.output_item.added", "output_index": 0, "item": {
        "type": "message", "id": "msg_bench", "role": "assistant", "content": []}})
    text = 0
    for piece in pieces(size):
        event({"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_bench",
               "content_index": 0, "delta": piece})
        text += len(piece)
    if two_step:
        call = {"type": "function_call", "id": "fc_bench", "call_id": "call_bench",
                "name": "bench_probe", "arguments": ""}
        event({"type": "response.output_item.added", "output_index": 1, "item": call})
        event({"type": "response.function_call_arguments.delta", "output_index": 1,
               "item_id": "fc_bench", "delta": "{}"})
        event({"type": "response.output_item.done", "output_index": 1,
               "item": dict(call, arguments="{}", status="completed")})
    tokens = max(1, text // 4)
    event({"type": "response.completed", "response": {"id": "resp_bench", "status": "completed",
           "usage": {"input_tokens": 10, "output_tokens": tokens, "total_tokens": 10 + tokens}}})
    return text


def chat(event, size, two_step):
    """An OpenAI chat-completions stream; returns the bytes of text sent."""
    event(chunk({"role": "assistant", "content": ""}))
    text = 0
    for piece in pieces(size):
        event(chunk({"content": piece}))
        text += len(piece)
    if two_step:
        event(chunk({"tool_calls": [{"index": 0, "id": "call_bench", "type": "function",
                                     "function": {"name": "bench_probe",
                                                  "arguments": "{}"}}]}))
    event(chunk({}, "tool_calls" if two_step else "stop"))
    tokens = max(1, text // 4)
    event({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "choices": [],
           "usage": {"prompt_tokens": 10, "completion_tokens": tokens,
                     "total_tokens": 10 + tokens}})
    event(b"[DONE]")
    return text


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
