"""An onmt_lite_server process for tests: started on a free port, called over HTTP, stopped by
SIGTERM."""

import http.client
import json
import signal
import subprocess
import sys
import threading

from tests.helpers import REPO


class Server:
    """An onmt_lite_server process on a free port of 127.0.0.1; its stderr lines kept in ``log``."""

    def __init__(self, config, *args):
        self.config = config
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "onmt_lite.bin.server",
                "--config",
                config,
                "--port",
                "0",
                *map(str, args),
            ],
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self.log = []
        self.port = None
        ready = threading.Event()

        def drain():
            for line in self.process.stderr:
                self.log.append(line)
                if '"listening"' in line:
                    self.port = int(json.loads(line)["url"].split(":")[2].split("/")[0])
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        ready.wait(120)
        assert self.port, "".join(self.log)

    def call(self, method, path, body=None, raw=None, root="/translator"):
        """``(status, JSON answer)`` of one request on a new connection."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        connection.request(
            method, root + path, body=data, headers={"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        payload = response.read()
        connection.close()
        return response.status, json.loads(payload) if payload else None

    def rss_kib(self):
        with open(f"/proc/{self.process.pid}/status", encoding="ascii") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def stop(self):
        """SIGTERM; returns the exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(60)
