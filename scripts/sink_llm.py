#!/usr/bin/env python3
"""sink_llm.py — a fake OpenAI chat-completions server for the benchmarks (bench-rss.sh):
it reads and discards each request body in 1 MiB chunks and answers "Done."
(no tool calls), so a task completes after one LLM call whatever its history.

Usage: sink_llm.py PORT_FILE LOG_FILE
  Listens on 127.0.0.1 on a free port and writes the port to PORT_FILE (atomically, through
  PORT_FILE.tmp). Appends one line per request to LOG_FILE: path, body bytes received, arrival
  time (seconds since the epoch, when the request line and headers were read) and the body's
  first 16 bytes. A request without Content-Length gets 411.
"""

import http.server, json, sys, time

PORT_FILE, LOG_FILE = sys.argv[1], sys.argv[2]
REPLY = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Done."},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
}).encode()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        arrival = time.time()
        length = self.headers.get("Content-Length")
        if length is None:
            self.send_error(411, "Content-Length required")
            return
        left, got, head = int(length), 0, b""
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                break
            if len(head) < 16:
                head += chunk[:16]
            got += len(chunk)
            left -= len(chunk)
        with open(LOG_FILE, "a") as log:
            log.write(f"{self.path} {got} {arrival:.6f} {head[:16]!r}\n")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(REPLY)))
        self.end_headers()
        self.wfile.write(REPLY)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(PORT_FILE + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os; os.rename(PORT_FILE + ".tmp", PORT_FILE)
server.serve_forever()
