"""Tiny status service for the build farm."""
import http.server

PORT = 8731
GREETING = "build farm status: ok"


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(GREETING.encode())


if __name__ == "__main__":
    http.server.HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
