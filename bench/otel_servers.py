#!/usr/bin/env python3
"""otel_servers.py — the servers of bench/otel-overhead.sh, in one process:

- a fake OpenAI chat-completions server (unstreamed): while the request has fewer than
  TOOL_CALLS tool results it answers with one call of `read_text_file` (which no server offers,
  so each is a tool call that fails at once), then "Done."; usage is always given; each answer
  comes LLM_DELAY_MS after the request (a model's latency);
- a live OTLP/HTTP receiver: answers every `POST /v1/traces` with 200 and counts the requests
  and body bytes (written to COUNT_FILE as "requests bytes" after each);
- a silent collector: accepts connections and never reads or answers.

Usage: otel_servers.py PORTS_FILE COUNT_FILE TOOL_CALLS LLM_DELAY_MS
  Listens on 127.0.0.1 on three free ports and writes "llm live silent" to PORTS_FILE
  (atomically). Runs until killed.
"""

import http.server, json, os, socket, sys, threading, time

PORTS_FILE, COUNT_FILE, TOOL_CALLS = sys.argv[1], sys.argv[2], int(sys.argv[3])
LLM_DELAY = int(sys.argv[4]) / 1000.0


class Llm(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        req = json.loads(body or b"{}")
        done = sum(1 for m in req.get("messages", []) if m.get("role") == "tool")
        if done < TOOL_CALLS:
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_{done + 1}", "type": "function",
                "function": {"name": "read_text_file",
                             "arguments": json.dumps({"path": f"file{done + 1}.txt"})}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": "Done."}
            finish = "stop"
        out = json.dumps({"id": "chatcmpl-bench", "object": "chat.completion", "created": 0,
                          "model": req.get("model", "bench"),
                          "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                          "usage": {"prompt_tokens": 100, "completion_tokens": 10,
                                    "total_tokens": 110}}).encode()
        time.sleep(LLM_DELAY)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    requests = 0
    bytes = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with Receiver.lock:
            Receiver.requests += 1
            Receiver.bytes += len(body)
            tmp = COUNT_FILE + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{Receiver.requests} {Receiver.bytes}\n")
            os.replace(tmp, COUNT_FILE)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def serve(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def silent():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    held = []

    def accept():
        while True:
            conn, _ = s.accept()
            held.append(conn)  # never read, never answered, never closed

    threading.Thread(target=accept, daemon=True).start()
    return s.getsockname()[1]


ports = f"{serve(Llm)} {serve(Receiver)} {silent()}\n"
with open(PORTS_FILE + ".tmp", "w") as f:
    f.write(ports)
os.replace(PORTS_FILE + ".tmp", PORTS_FILE)
threading.Event().wait()
