#!/usr/bin/env python3
"""Serves tests/monitoring/fixtures/<name>.prom at /<name> as an exporter would.

Stands in for NVIDIA dcgm-exporter and the Slurm exporter, which need GPUs
and a Slurm controller. @NODE@ in a fixture becomes the node name given, so
the series join the test's slurm_job_node_info mapping.

    fixture_server.py PORT FIXTURE_DIR NODE
"""
import http.server
import os
import sys

port, fixtures, node = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Exporter(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = os.path.join(fixtures, os.path.basename(self.path.split("?")[0]) + ".prom")
        if not os.path.isfile(path):
            self.send_error(404)
            return
        with open(path, encoding="utf-8") as f:
            body = f.read().replace("@NODE@", node).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", port), Exporter).serve_forever()
