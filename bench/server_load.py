"""onmt_lite_server against OpenNMT-py 3.5.1's onmt_server under 1, 4 and 16 concurrent clients.

    .venv/bin/python bench/server_load.py [-minutes 5] [-sentences 1000] [-clients 1 4 16]
                                          [-models LITE PEER -requests FILE] [-gpu]
                                          [-cuda_graphs]

Models: g2p-sr's bidirectional LSTMs (2x256) that ``bench/quality.py g2p -minutes M`` trains with
the same settings for the same wall-clock time with each toolkit (trained first when missing), each
served by its own toolkit with the same search (beam 5, no length penalty, at most 100 tokens,
batches of 30 sentences). Each client sends one word a request (g2p-sr's training words, in order)
and waits for the answer before sending the next: ``-sentences`` requests in all, shared among the
clients. The servers run one at a time on 127.0.0.1, after 20 warm-up requests. The table gives
sentences/s (requests answered over the wall-clock time of the whole run), the median and 99th
percentile of the requests' latencies, and the ratios; every answer is checked (status 200, its own
source, a translation). ``-models`` serves two given checkpoints instead (on a lent GPU machine:
those of bench/gpu_translate_speed.py, with ``-requests`` toy-ende lines), ``-gpu`` on GPU 0 (the
model's ``gpu`` option in both servers' configurations); ``-cuda_graphs`` (with ``-gpu``) serves
onmt_lite's model a second time with ``cuda_graphs`` in its options (its search steps replayed as
CUDA graphs, recorded in the first requests and kept), a third row set. Figures go to
bench/results/server_load.json (server_load_gpu.json with ``-gpu``; the models' training and exact
match, when trained here, to bench/results/server_load_models.json).
"""

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quality import PEER_ENV, newest_checkpoint, write_results  # noqa: E402
from toolkits import REPO, SHARED, lite, peer  # noqa: E402

SEARCH = {
    "beam_size": 5,
    "max_length": 100,
    "length_penalty": "none",
    "alpha": 0.0,
    "batch_size": 30,
}
# 3.x cuts outputs at 1.25 x the source + 5 unless told
PEER_SEARCH = {
    **SEARCH,
    "max_length_ratio": 0,
}
MODEL_ID = 100


def ensure_models(work, minutes):
    """The g2p-sr checkpoints of both toolkits (quality.py g2p trains them when missing)."""
    directory = os.path.join(work, "g2p", "beam_5_exact_match")
    patterns = {
        "onmt_lite": f"{directory}/lite_model_step_*.pt",
        "OpenNMT-py": f"{directory}/peer_model_step_*.pt",
    }
    try:
        return {toolkit: newest_checkpoint(p)[0] for toolkit, p in patterns.items()}
    except (SystemExit, ValueError, IndexError):
        subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, "bench", "quality.py"),
                "g2p",
                "-minutes",
                str(minutes),
                "-work",
                work,
                "-results",
                "server_load_models",
            ],
            check=True,
        )
        return {toolkit: newest_checkpoint(p)[0] for toolkit, p in patterns.items()}


class Served:
    """A server process of one toolkit serving ``model`` as id 100 on 127.0.0.1:``port``, with
    ``more_opt`` in its translation options; ``name`` (default: the toolkit's) names its files."""

    def __init__(self, toolkit, model, port, work, peer_home, gpu=False, more_opt=None, name=None):
        name = name or toolkit  # of its files
        conf = os.path.join(work, f"{name}.conf.json")
        opt = PEER_SEARCH if toolkit == "OpenNMT-py" else SEARCH
        if gpu:  # both servers' way to put a model on GPU 0
            opt = {**opt, "gpu": 0}
        opt = {**opt, **(more_opt or {})}
        with open(conf, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "models_root": os.path.dirname(model),
                    "models": [
                        {"id": MODEL_ID, "model": os.path.basename(model), "load": True, "opt": opt}
                    ],
                },
                f,
            )
        # 3.x renamed 1.x's --config to --model_config
        command = (
            [*peer(peer_home, "server"), "--model_config", conf]
            if toolkit == "OpenNMT-py"
            else [*lite("server"), "--config", conf]
        )
        self.log = open(os.path.join(work, f"{name}.server.log"), "w", encoding="utf-8")
        self.process = subprocess.Popen(
            [*command, "--ip", "127.0.0.1", "--port", str(port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=PEER_ENV if toolkit == "OpenNMT-py" else None,
        )
        self.port = port
        for _ in range(600):
            try:
                if request(port, "GET", "/translator/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise SystemExit(f"{toolkit}'s server did not start: see {self.log.name}")

    def stop(self):
        self.process.terminate()
        self.process.wait(60)
        self.log.close()


def request(port, method, path, body=None):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    connection.request(
        method,
        path,
        body=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    payload = response.read()
    connection.close()
    return response.status, json.loads(payload) if payload else None


def load(port, words, clients):
    """Run ``clients`` clients over ``words`` (one a request); returns (seconds, latencies,
    failures)."""
    latencies = []
    failures = []

    def client(c):
        for word in words[c::clients]:
            start = time.perf_counter()
            status, answer = request(
                port, "POST", "/translator/translate", [{"src": word, "id": MODEL_ID}]
            )
            latencies.append(time.perf_counter() - start)
            if status != 200 or answer[0][0]["src"] != word or not answer[0][0]["tgt"].strip():
                failures.append((word, status, answer))

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, latencies, failures


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "-minutes", type=float, default=5.0, help="training budget of each model, when missing"
    )
    parser.add_argument(
        "-sentences", type=int, default=1000, help="requests per run (one word each)"
    )
    parser.add_argument("-clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument(
        "-peer",
        default="/tmp/peer-opennmt",
        help="OpenNMT-py 3.5.1: its venv directory, or a Python that imports it",
    )
    parser.add_argument("-work", default="/tmp/onmt_lite_quality")
    parser.add_argument("-port", type=int, default=5077)
    parser.add_argument(
        "-models",
        nargs=2,
        metavar=("LITE", "PEER"),
        help="serve these checkpoints (onmt_lite's, OpenNMT-py's) instead of the g2p-sr models",
    )
    parser.add_argument(
        "-requests",
        default=os.path.join(SHARED, "data", "g2p-sr", "src.train"),
        help="the lines sent, one a request (default: g2p-sr's training words)",
    )
    parser.add_argument("-gpu", action="store_true", help="both servers decode on GPU 0")
    parser.add_argument(
        "-cuda_graphs",
        action="store_true",
        help="with -gpu: onmt_lite again, its search steps replayed as CUDA graphs",
    )
    parser.add_argument(
        "-dry_run", action="store_true", help="a check of the script: no figures written"
    )
    opt = parser.parse_args()
    if opt.cuda_graphs and not opt.gpu and not opt.dry_run:
        parser.error("-cuda_graphs needs -gpu: graphs are recorded on a CUDA device")
    os.makedirs(opt.work, exist_ok=True)
    if not os.path.isfile(opt.requests):
        raise SystemExit(f"-requests {opt.requests}: no such file")
    models = (
        dict(zip(("onmt_lite", "OpenNMT-py"), opt.models))
        if opt.models
        else ensure_models(opt.work, opt.minutes)
    )
    with open(opt.requests, encoding="utf-8") as f:
        words = [line.strip() for line in f if line.strip()][: opt.sentences]
    configurations = [("onmt_lite", "onmt_lite", None), ("OpenNMT-py", "OpenNMT-py", None)]
    if opt.cuda_graphs and opt.gpu:
        configurations.append(("onmt_lite -cuda_graphs", "onmt_lite", {"cuda_graphs": True}))
    elif opt.cuda_graphs:
        print("onmt_lite -cuda_graphs: skipped (no -gpu: graphs are recorded on a CUDA device)")
    rows = []
    measured = []
    for label, toolkit, more_opt in configurations:
        name = label.replace(" -", "_")  # its configuration and log files
        try:
            served = Served(
                toolkit, models[toolkit], opt.port, opt.work, opt.peer, opt.gpu, more_opt, name
            )
            try:
                rows += served_rows(label, opt.port, words, opt.clients)
            finally:
                served.stop()
        except SystemExit as failed:
            if more_opt is None:
                raise
            print(f"{label}: {failed}")  # the option's first run on CUDA: the others' table stays
            continue
        measured.append(label)
    for label in measured:
        if label != "OpenNMT-py":
            print_table(rows, label, opt.clients)
    if not opt.dry_run:
        name = "server_load_gpu" if opt.gpu else "server_load"
        write_results(name, {"models": models, "search": SEARCH, "rows": rows, "gpu": opt.gpu})


def served_rows(label, port, words, client_counts):
    """The rows of the server on ``port`` (``label``'s), after 20 warm-up requests: one for each
    count of clients sending ``words``, every answer checked."""
    load(port, words[:20], 1)  # warm-up
    rows = []
    for clients in client_counts:
        seconds, latencies, failures = load(port, words, clients)
        if failures:
            raise SystemExit(
                f"{label}, {clients} clients: {len(failures)} bad answers, e.g. {failures[0]}"
            )
        rows.append(
            {
                "toolkit": label,
                "clients": clients,
                "sentences": len(words),
                "seconds": seconds,
                "sentences_per_s": len(words) / seconds,
                "p50_ms": 1000 * statistics.median(latencies),
                "p99_ms": 1000 * percentile(latencies, 0.99),
            }
        )
        print(rows[-1], flush=True)
    return rows


def print_table(rows, label, client_counts):
    """``label``'s rows against OpenNMT-py's, a line per count of clients."""
    print(
        f"\n| clients | {label} sent/s | OpenNMT-py sent/s | ratio | {label} p50 / p99 ms | "
        "OpenNMT-py p50 / p99 ms |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for clients in client_counts:
        ours, theirs = (
            next(r for r in rows if r["toolkit"] == t and r["clients"] == clients)
            for t in (label, "OpenNMT-py")
        )
        ratio = ours["sentences_per_s"] / theirs["sentences_per_s"]
        print(
            f"| {clients} | {ours['sentences_per_s']:.1f} | {theirs['sentences_per_s']:.1f} | "
            f"{ratio:.2f}x | {ours['p50_ms']:.0f} / {ours['p99_ms']:.0f} | "
            f"{theirs['p50_ms']:.0f} / {theirs['p99_ms']:.0f} |"
        )


if __name__ == "__main__":
    main()
