"""onmt_lite_server over real HTTP on 127.0.0.1: OpenNMT-py 1.x's request shapes, answers equal to
translating each sentence alone (also when clients' sentences share one search), the model
endpoints, bad requests answered 4xx while the server goes on, a bounded load test, start-up errors,
and a graceful SIGTERM."""

import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

import pytest

from onmt_lite import Translator
from onmt_lite.serve.config import model_spec
from onmt_lite.serve.models import ServedModel
from onmt_lite.translate.search import Search
from onmt_lite.translate.service import TranslationService
from tests.helpers import (
    REPO,
    assert_same_translation,
    lines,
    run_in_process,
    scores_agree,
    trained_reversal_model,
)
from tests.server_helpers import Server

SMALL = [
    "-rnn_size",
    64,
    "-word_vec_size",
    32,
    "-layers",
    1,
    "-batch_size",
    32,
    "-optim",
    "adam",
    "-learning_rate",
    0.01,
    "-seed",
    1,
]
PLAIN = 100
COPY = 7
SPM = 8
OPTIONS = {
    PLAIN: {"beam_size": 5, "n_best": 2},
    COPY: {"beam_size": 3, "max_length": 20},
    SPM: {"beam_size": 2},
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A plain model and a copy model whose target vocabulary lacks most words (trained on
    reversal)."""
    return {
        kind: trained_reversal_model(tmp_path_factory, f"server_{kind}", pre, [*SMALL, *extra], 300)
        for kind, pre, extra in (
            ("plain", [], []),
            ("copy", ["-dynamic_dict", "-tgt_vocab_size", 6], ["-copy_attn"]),
        )
    }


@pytest.fixture(scope="module")
def sentencepiece_model(models, tmp_path_factory):
    import sentencepiece

    prefix = str(tmp_path_factory.mktemp("spm") / "sp")
    sentencepiece.SentencePieceTrainer.train(
        input=models["plain"]["src"],
        model_prefix=prefix,
        vocab_size=24,
        model_type="bpe",
        minloglevel=2,
    )
    return prefix + ".model"


def write_config(directory, models, sentencepiece_model, **changes):
    """A 1.x conf.json: the plain model (id 100, loaded at start), the copy model (id 7, loaded on
    first use), the plain model behind a sentencepiece tokenizer (id 8)."""
    root = os.path.dirname(models["plain"]["model"])
    entries = [
        {
            "id": PLAIN,
            "model": os.path.basename(models["plain"]["model"]),
            "timeout": 600,
            "on_timeout": "to_cpu",
            "load": True,
            "opt": OPTIONS[PLAIN],
        },
        {"id": COPY, "model": models["copy"]["model"], "opt": OPTIONS[COPY]},
        {
            "id": SPM,
            "model": os.path.basename(models["plain"]["model"]),
            "opt": OPTIONS[SPM],
            "tokenizer": {"type": "sentencepiece", "model": sentencepiece_model},
        },
    ]
    conf = {"models_root": root, "models": entries, **changes}
    path = os.path.join(str(directory), "conf.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(conf, f)
    return path


@pytest.fixture(scope="module")
def server(models, sentencepiece_model, tmp_path_factory):
    server = Server(write_config(tmp_path_factory.mktemp("conf"), models, sentencepiece_model))
    yield server
    assert server.stop() == 0, "".join(server.log)


def translators(models, sentencepiece_model):
    """Each served model's Translator, to translate sentences alone."""
    return {
        PLAIN: Translator.load(models["plain"]["model"], **OPTIONS[PLAIN]),
        COPY: Translator.load(models["copy"]["model"], **OPTIONS[COPY]),
        SPM: Translator.load(
            models["plain"]["model"],
            src_spm=sentencepiece_model,
            tgt_spm=sentencepiece_model,
            **OPTIONS[SPM],
        ),
    }


@pytest.fixture(scope="module")
def alone(models, sentencepiece_model):
    """``alone(model_id, sentence)``: the Result of translating the sentence by itself (cached)."""
    by_id = translators(models, sentencepiece_model)
    cache = {}

    def translate(model_id, sentence):
        if (model_id, sentence) not in cache:
            cache[model_id, sentence] = by_id[model_id].translate([sentence])[0]
        return cache[model_id, sentence]

    return translate


def in_threads(function, n):
    """``[function(0), ..., function(n - 1)]``, each call in a thread of its own, all started at
    once."""
    out = [None] * n
    threads = [
        threading.Thread(target=lambda i: out.__setitem__(i, function(i)), args=(i,))
        for i in range(n)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def check_answer(answer, model_id, sources, alone):
    """A 1.x answer: one list per n-best rank, each in request order, with the sentence's
    translation alone (its white space around it) and its score (to float32 rounding, as
    docs/usage.md promises: the products have other row counts in a shared search)."""
    n_best = OPTIONS[model_id].get("n_best", 1)
    assert len(answer) == n_best and all(len(rank) == len(sources) for rank in answer)
    for k, rank in enumerate(answer):
        for source, item in zip(sources, rank):
            assert set(item) == {"src", "tgt", "n_best", "pred_score"} and item["src"] == source
            expected = alone(model_id, source)
            head = source[: len(source) - len(source.lstrip())]
            tail = source[len(source.rstrip()) :]
            assert item["tgt"] == head + expected.hypotheses[k] + tail and item["n_best"] == n_best
            assert scores_agree(item["pred_score"], expected.scores[k], len(expected.tokens[k]) + 1)


def test_translate_answers_in_1x_shape_what_each_sentence_gets_alone(server, models, alone):
    sources = lines(models["plain"]["src"])[:12]
    # 1.x keeps the white space around; empty stays empty
    sources[3] = "  " + sources[3] + " "
    sources[5] = ""
    status, answer = server.call("POST", "/translate", [{"src": s, "id": PLAIN} for s in sources])
    assert status == 200
    check_answer(answer, PLAIN, sources, alone)
    # the model has learnt to reverse
    assert answer[0][0]["tgt"] == " ".join(reversed(sources[0].split()))


def test_the_copy_model_and_the_sentencepiece_tokenizer(server, models, alone):
    sources = lines(models["copy"]["src"])[:8]
    status, answer = server.call("POST", "/translate", [{"src": s, "id": COPY} for s in sources])
    assert status == 200
    check_answer(answer, COPY, sources, alone)
    status, answer = server.call("POST", "/translate", [{"src": "w1w2 w3", "id": SPM}])
    assert status == 200 and "\u2581" not in answer[0][0]["tgt"]  # pieces decoded
    check_answer(answer, SPM, ["w1w2 w3"], alone)


def test_concurrent_clients_each_get_what_their_sentences_get_alone(server, models, alone):
    sources = lines(models["plain"]["src"]) + lines(models["copy"]["src"])
    rng = random.Random(0)
    requests = [
        (rng.choice([PLAIN, COPY]), rng.sample(sources, rng.randint(1, 6))) for _ in range(48)
    ]
    answers = in_threads(
        lambda i: server.call(
            "POST", "/translate", [{"src": s, "id": requests[i][0]} for s in requests[i][1]]
        ),
        len(requests),
    )
    for (model_id, batch), (status, answer) in zip(requests, answers):
        assert status == 200
        check_answer(answer, model_id, batch, alone)


def test_sentences_arriving_during_a_search_join_it_and_translate_as_alone(
    models, alone, monkeypatch
):
    """The library under the server: requests from 16 threads, while a long one decodes, run in
    fewer searches than requests; every request's Results are its sentences' alone."""
    searches = []
    stream = Search.stream
    monkeypatch.setattr(
        Search, "stream", lambda self, feeder: searches.append(1) or stream(self, feeder)
    )
    for kind, model_id in (("plain", PLAIN), ("copy", COPY)):
        service = TranslationService(
            lambda device, kind=kind, model_id=model_id: Translator.load(
                models[kind]["model"], device=device or "cpu", batch_size=8, **OPTIONS[model_id]
            )
        )
        service.control("load").result()
        sources = lines(models[kind]["src"])
        rng = random.Random(1)
        requests = [rng.sample(sources, rng.randint(1, 5)) for _ in range(16)]
        searches.clear()
        long_one = service.translate(sources)
        futures = in_threads(
            lambda i, service=service, requests=requests: service.translate(requests[i]),
            len(requests),
        )
        answers = [future.result(timeout=300) for future in futures]
        long_answer = long_one.result(timeout=300)
        assert len(searches) < len(requests)
        service.close()
        for request, results in zip([sources, *requests], [long_answer, *answers]):
            for source, result in zip(request, results):
                expected = alone(model_id, source)
                assert_same_translation(result, expected)


def test_models_health_and_the_model_endpoints(server, models, alone):
    status, listed = server.call("GET", "/models")
    assert status == 200 and {m["model_id"] for m in listed} >= {PLAIN, COPY, SPM}
    plain = next(m for m in listed if m["model_id"] == PLAIN)
    assert plain["loaded"] is True and plain["opt"] == OPTIONS[PLAIN] and plain["timeout"] == 600
    assert server.call("GET", "/health") == (200, {"status": "ok"})
    assert server.call("GET", f"/unload_model/{PLAIN}") == (
        200,
        {"status": "ok", "model_id": PLAIN},
    )
    assert (
        next(m for m in server.call("GET", "/models")[1] if m["model_id"] == PLAIN)["loaded"]
        is False
    )
    source = lines(models["plain"]["src"])[0]
    # loads it again
    status, answer = server.call("POST", "/translate", [{"src": source, "id": PLAIN}])
    assert (
        status == 200
        and next(m for m in server.call("GET", "/models")[1] if m["model_id"] == PLAIN)["loaded"]
    )
    check_answer(answer, PLAIN, [source], alone)
    assert server.call("GET", f"/to_cpu/{PLAIN}") == (200, {"status": "ok", "model_id": PLAIN})
    status, answer = server.call("GET", f"/to_gpu/{PLAIN}")
    assert status == 400 and "configured for the CPU" in answer["error"]
    # -alpha without a length penalty is idle: said once, for the clone, however often it loads
    status, answer = server.call(
        "POST", f"/clone_model/{PLAIN}", {"opt": {"beam_size": 1, "alpha": 0.6}, "timeout": 5}
    )
    assert status == 200 and answer["status"] == "ok" and answer["load_time"] >= 0
    clone = answer["model_id"]
    assert clone not in (PLAIN, COPY, SPM)
    status, answer = server.call("POST", "/translate", [{"src": source, "id": clone}])
    greedy = Translator.load(models["plain"]["model"], beam_size=1).translate([source])[0]
    assert status == 200 and answer[0][0]["tgt"] == greedy.hypotheses[0]
    assert server.call("GET", f"/unload_model/{clone}")[0] == 200
    assert server.call("POST", "/translate", [{"src": source, "id": clone}])[0] == 200
    idle = [json.loads(line) for line in server.log if "has no effect" in line]
    assert [(line["level"], line["model_id"], line["message"]) for line in idle] == [
        ("WARNING", clone, "-alpha 0.6 has no effect: only -length_penalty wu reads it")
    ]


@pytest.mark.parametrize(
    "body,status,message",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"", 400, "body is empty"),
        (b"[]", 400, "non-empty list"),
        (b'{"src": "w1"}', 400, "non-empty list"),
        (b'["w1 w2"]', 400, "item 0: expected an object"),
        (b'[{"id": 100}]', 400, 'item 0: no "src"'),
        (b'[{"src": 5, "id": 100}]', 400, '"src" must be a string'),
        (b'[{"src": "w1", "id": "100"}]', 400, '"id" must be a whole number'),
        (b'[{"src": "w1", "id": 100}, {"src": "w2", "id": 7}]', 400, "one request, one model"),
        (b'[{"src": "w1", "id": 12345}]', 404, "no model with id 12345"),
        (b'[{"src": "w1", "id": 100, "model": "/etc/passwd"}]', 400, "unknown key(s) 'model'"),
        (
            b"[" + b'{"src": "w1", "id": 100},' * 400_000 + b'{"src": "w1", "id": 100}]',
            413,
            "limit of 1000000",
        ),
        (
            json.dumps([{"src": "w1 " * 100_000, "id": 100}]).encode(),
            400,
            "sentence 1 has 100000 tokens",
        ),
        (b'\xff\xfe[', 400, "not valid JSON"),
    ],
)
def test_a_bad_request_gets_a_4xx_json_error_and_the_server_goes_on(server, body, status, message):
    got, answer = server.call("POST", "/translate", raw=body)
    assert got == status and answer["status"] == "error" and message in answer["error"], answer
    assert server.call("GET", "/health") == (200, {"status": "ok"})


def test_clone_options_are_checked_like_the_command_line_and_name_no_paths(server):
    for opt, message in (
        ({"beam_size": 0}, "0 is below the minimum 1"),
        ({"src": "/etc/passwd"}, "not for the server"),
        ({"model": "/etc/passwd"}, "not for the server"),
        ({"phrase_table": "/etc/passwd"}, "may not name files (phrase_table)"),
        ({"src_spm": "/etc/passwd"}, "may not name files (src_spm)"),
        ("beam_size", '"opt" must be an object'),
        ({"no_such_option": 1}, "unknown translation option"),
        ({"beam_size": 2, "n_best": 3}, "n_best 3 is larger than beam_size 2"),
    ):
        status, answer = server.call("POST", f"/clone_model/{PLAIN}", {"opt": opt})
        assert status == 400 and message in answer["error"], answer
    status, answer = server.call("POST", "/clone_model/999", {})
    assert status == 404
    status, answer = server.call("GET", "/translate")
    assert status == 405 and answer["status"] == "error"
    status, answer = server.call("GET", "/models", root="/elsewhere")
    assert status == 404 and "no such endpoint" in answer["error"]


def test_a_thousand_bad_requests_and_a_client_gone_mid_request_leave_it_serving(server, models):
    for i in range(1000):
        status, _ = server.call("POST", "/translate", raw=[b"{", b"[]", b'[{"id": 100}]'][i % 3])
        assert status == 400
    with socket.create_connection(
        ("127.0.0.1", server.port)
    ) as sock:  # promises 1,000 bytes, sends 20, leaves
        sock.sendall(
            b"POST /translator/translate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
            b'[{"src": "w1 w2", "i'
        )
    with socket.create_connection(("127.0.0.1", server.port)) as sock:  # leaves before the answer
        body = json.dumps([{"src": s, "id": PLAIN} for s in lines(models["plain"]["src"])]).encode()
        sock.sendall(
            b"POST /translator/translate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
            % len(body)
            + body
        )
    source = lines(models["plain"]["src"])[1]
    status, answer = server.call("POST", "/translate", [{"src": source, "id": PLAIN}])
    assert status == 200 and answer[0][0]["tgt"] == " ".join(reversed(source.split()))


def test_under_load_16_clients_and_2000_sentences_no_error_no_lost_or_reordered_answer(
    server, models, alone
):
    """16 clients, each 25 requests of 5 sentences, twice: every answer is its own request's, in
    order; the server's resident memory after the second round is within 5% of the first's."""
    sources = lines(models["plain"]["src"])
    memory = []
    for round_ in range(2):
        rng = random.Random(round_)
        requests = [[rng.choice(sources) for _ in range(5)] for _ in range(16 * 25)]

        def client(c, requests=requests):
            """The requests of client ``c`` that were not answered with their own sentences, in
            order."""
            failed = []
            for batch in requests[c::16]:
                status, answer = server.call(
                    "POST", "/translate", [{"src": s, "id": PLAIN} for s in batch]
                )
                if (
                    status != 200
                    or [item["src"] for item in answer[0]] != batch
                    or [item["tgt"] for item in answer[0]]
                    != [alone(PLAIN, s).hypotheses[0] for s in batch]
                ):
                    failed.append((status, batch, answer))
            return failed

        failures = [f for failed in in_threads(client, 16) for f in failed]
        assert not failures, failures[:2]
        memory.append(server.rss_kib())
    assert memory[1] <= 1.05 * memory[0], memory


@pytest.mark.parametrize(
    "change,message",
    [
        ({"models": [{"model": "missing.pt"}]}, "models[0]: model file"),
        (
            {"models": [{"model": "PLAIN", "tokenizer": {"type": "pyonmttok", "params": {}}}]},
            "pyonmttok is not supported",
        ),
        ({"models": [{"model": "PLAIN", "opt": {"beam_size": "five"}}]}, "beam_size"),
        (
            {"models": [{"model": "PLAIN", "opt": {"output": "x.txt"}}]},
            "'output' is not for the server",
        ),
        ({"models": [{"model": "PLAIN", "preprocess": ["m.f"]}]}, "'preprocess' is not supported"),
        (
            {"models": [{"model": "PLAIN", "id": 1}, {"model": "PLAIN", "id": 1}]},
            "id 1 is already taken",
        ),
        ({"models": [{"model": "PLAIN", "load": True, "opt": {"gpu": 0}}]}, "model 0:"),
        ({"models": []}, "non-empty list"),
    ],
)
def test_a_bad_configuration_stops_the_start_with_one_line_and_status_2(
    models, tmp_path, change, message
):
    name = os.path.basename(models["plain"]["model"])
    change = json.loads(json.dumps(change).replace('"PLAIN"', json.dumps(name)))
    if change["models"] and "gpu" in json.dumps(change) and __import__("torch").cuda.is_available():
        pytest.skip("this machine has a CUDA device: gpu 0 loads")
    config = str(tmp_path / "conf.json")
    with open(config, "w", encoding="utf-8") as f:
        json.dump({"models_root": os.path.dirname(models["plain"]["model"]), **change}, f)
    result = run_in_process("server", "--config", config, "--port", 0)
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"onmt_lite_server: error: {config}: ") and message in last, last


def test_a_taken_port_a_missing_configuration_and_an_unknown_option_are_one_line_errors(server):
    taken = subprocess.run(
        [
            sys.executable,
            "-m",
            "onmt_lite.bin.server",
            "--config",
            server.config,
            "--port",
            str(server.port),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert taken.returncode == 2 and f"--port {server.port}: cannot listen there" in taken.stderr, (
        taken.stderr
    )
    # the rest fail before any model loads: in this process
    missing = run_in_process("server", "--config", "no-such-conf.json")
    assert (
        missing.returncode == 2
        and "no-such-conf.json: cannot read the configuration" in missing.stderr
    )
    unknown = run_in_process("server", "--threads", 2)
    assert unknown.returncode == 2 and "unrecognized arguments: --threads" in unknown.stderr
    usage = run_in_process("server", "-h")
    assert usage.returncode == 0 and all(
        f"--{name}" in usage.stdout
        for name in (
            "ip",
            "port",
            "url_root",
            "config",
            "debug",
            "max_request_bytes",
            "max_sentence_tokens",
            "request_timeout",
            "shutdown_timeout",
        )
    )


def test_sigterm_lets_the_request_in_flight_finish_then_exits_0(
    models, sentencepiece_model, tmp_path
):
    # logs each request's body
    server = Server(write_config(tmp_path, models, sentencepiece_model), "--debug")
    sources = lines(models["plain"]["src"]) * 25  # 1,000 sentences
    answer = {}
    client = threading.Thread(
        target=lambda: answer.update(
            result=server.call("POST", "/translate", [{"src": s, "id": PLAIN} for s in sources])
        )
    )
    client.start()
    while not any('"translate request"' in line for line in server.log):  # the server has read it
        time.sleep(0.01)
    assert server.stop() == 0
    client.join()
    status, body = answer["result"]
    assert status == 200 and len(body[0]) == len(sources)
    assert '"stopped"' in server.log[-1]
    requests = [json.loads(line) for line in server.log if '"request"' in line]
    assert requests[-1]["status"] == 200 and requests[-1]["sentences"] == len(sources)


def test_a_model_served_with_cuda_graphs_and_fp16_moves_to_the_cpu_without_them(models, alone):
    """``to_cpu`` (an idle model's default) loads the model on the CPU with what a CPU has: no
    ``cuda_graphs`` and float32 for ``fp16`` (CUDA's, which the command refuses there); the
    configured options stay as given, and the model translates as the plain one alone."""
    root = os.path.dirname(models["plain"]["model"])
    opt = {**OPTIONS[PLAIN], "gpu": 0, "cuda_graphs": True, "precision": "fp16"}
    conf = {"id": 1, "model": os.path.basename(models["plain"]["model"]), "opt": opt}
    spec = model_spec(conf, 1, root, "model 0")
    served = ServedModel(spec, max_tokens=1000)
    sources = lines(models["plain"]["src"])[:5]
    try:
        served.service.control("to_cpu").result(timeout=120)
        translator = served.service.translator
        results = served.service.translate(sources).result(timeout=120)
    finally:
        served.service.close()
    assert translator.device.type == "cpu" and not translator.cuda_graphs
    assert spec.opt.cuda_graphs and spec.opt.precision == "fp16" and spec.opt.gpu == 0
    for source, result in zip(sources, results):
        assert_same_translation(result, alone(PLAIN, source))
