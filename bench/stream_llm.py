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
        messages = req.get("messages") or [{}]
        if two_step and messages[-1].get("role") == "tool":
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

        event(chunk({"role": "assistant", "content": ""}))
        text = 0
        if size == 0:
            event(chunk({"content": "Done."}))
            text = 5
        i = 0
        while text < size:
            n = min(PIECE, size - text)
            piece = bytes(WORDS[(i + k) % len(WORDS)] for k in range(n)).decode()
            event(chunk({"content": piece}))
            text += n
            i += n
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
        self.wfile.flush()
        self.close_connection = True
        with open(LOG_FILE, "a") as log:
            log.write(f"{self.path} {model} {text} {sent}\n")

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
