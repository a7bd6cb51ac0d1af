"""onmt_lite_server against a hostile client (issue 43's classes): clone options that try to name
files, non-finite and huge numbers, odd text and JSON, non-finite scores, a clone that fails to
load, an oversized body read by common clients, and a request that times out mid-search. After
each case the server still answers /health."""

import json
import math
import os
import shutil
import subprocess
import threading
import urllib.error
import urllib.request

import pytest
import torch

from onmt_lite import Translator
from tests.helpers import lines, run_in_process, trained_reversal_model
from tests.server_helpers import Server

SMALL = [
    "-rnn_size",
    32,
    "-word_vec_size",
    16,
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
PLAIN = 1
SPARSE = 2
SLOW = 3
SPARSE_OPT = {"beam_size": 5, "n_best": 5, "max_length": 20}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A plain model (100 steps: it writes long outputs) and a sparsemax one (its n-best lists
    hold hypotheses of probability 0)."""
    return {
        "plain": trained_reversal_model(tmp_path_factory, "hostile_plain", [], SMALL, 100),
        "sparse": trained_reversal_model(
            tmp_path_factory,
            "hostile_sparse",
            [],
            [*SMALL, "-generator_function", "sparsemax"],
            200,
        ),
    }


def write_config(directory, models, **entry_changes):
    root = os.path.dirname(models["plain"]["model"])
    entries = [
        {
            "id": PLAIN,
            "model": os.path.basename(models["plain"]["model"]),
            "load": True,
            "opt": {"beam_size": 2},
        },
        {"id": SPARSE, "model": models["sparse"]["model"], "opt": SPARSE_OPT},
        {
            "id": SLOW,
            "model": os.path.basename(models["plain"]["model"]),
            "opt": {"beam_size": 5, "max_length": 400, "min_length": 400, "batch_size": 4},
        },
    ]
    entries[0].update(entry_changes)
    path = os.path.join(str(directory), "conf.json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"models_root": root, "models": entries}).replace('"NAN"', "NaN"))
    return path


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    server = Server(
        write_config(tmp_path_factory.mktemp("hostile_conf"), models),
        "--request_timeout",
        3,
        "--shutdown_timeout",
        5,
    )
    yield server
    assert server.stop() == 0, "".join(server.log[-5:])


def listed(server):
    status, models = server.call("GET", "/models")
    assert status == 200
    return sorted(m["model_id"] for m in models)


def healthy(server):
    return server.call("GET", "/health") == (200, {"status": "ok"})


def test_clone_options_cannot_name_a_file(server, models, tmp_path):
    elsewhere = str(tmp_path / "elsewhere.pt")  # a real checkpoint outside models_root
    shutil.copy(models["plain"]["model"], elsewhere)
    before = listed(server)
    for opt, message in (
        ({"beam_size": [5, "-model", elsewhere]}, "takes one value, not a list"),
        ({f"model={elsewhere}": 1}, "unknown translation option"),
        ({"-model": elsewhere}, "unknown translation option"),
        ({"beam_size": f"5 -model {elsewhere}"}, "beam_size"),
        ({"replace_unk": True, "max_length": "-model"}, "may not start with '-'"),
        ({"ignore_when_blocking": ["a", "-model", elsewhere]}, "may not start"),
        ({"model": elsewhere}, "not for the server"),
        ({"h": True}, "unknown translation option"),
    ):
        status, answer = server.call("POST", f"/clone_model/{PLAIN}", {"opt": opt})
        assert status == 400 and message in answer["error"], (opt, answer)
    assert listed(server) == before and healthy(server)
    status, answer = server.call("POST", f"/clone_model/{PLAIN}", {"opt": {"max_length": -1}})
    assert status == 400 and "below the minimum" in answer["error"]  # a number, read as one


@pytest.mark.parametrize(
    "body,message",
    [
        (b'{"opt": {"beam_size": 2}, "timeout": NaN}', "NaN is not a JSON number"),
        (b'{"timeout": Infinity}', "Infinity is not a JSON number"),
        (
            b'{"timeout": 1e10}',
            '"timeout" must be -1 (never) or a number of seconds from 0 to 1e+09',
        ),
        (b'{"timeout": -2}', '"timeout" must be -1'),
        (b'{"opt": {"beam_size": 1000000000}}', "beam_size"),
        (b'{"opt": {"alpha": 1e400}}', "1e400 is beyond the range"),
    ],
)
def test_a_clone_with_a_non_finite_or_huge_number_is_refused(server, body, message):
    before = listed(server)
    status, answer = server.call("POST", f"/clone_model/{PLAIN}", raw=body)
    assert status == 400 and message in answer["error"], answer
    assert listed(server) == before and healthy(server)


@pytest.mark.parametrize(
    "timeout,message",
    [
        ("NAN", "NaN is not a JSON number"),
        (1e10, "from 0 to 1e+09"),
    ],
)
def test_a_config_with_a_non_finite_or_huge_timeout_stops_the_start(
    models, tmp_path, timeout, message
):
    config = write_config(tmp_path, models, timeout=timeout)
    result = run_in_process("server", "--config", config, "--port", "0")
    last = result.stderr.strip().splitlines()[-1]
    assert (
        result.returncode == 2
        and message in last
        and last.startswith(f"onmt_lite_server: error: {config}")
    ), result.stderr


def test_a_config_nested_100000_deep_is_one_line(tmp_path):
    config = tmp_path / "conf.json"
    config.write_text('{"models": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    result = run_in_process("server", "--config", str(config), "--port", "0")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"onmt_lite_server: error: {config}: not valid JSON (nested too deeply)"
    ], result.stderr


def test_a_port_out_of_range_is_refused_before_any_model_loads(models, tmp_path):
    config = write_config(tmp_path, models)
    result = run_in_process("server", "--config", config, "--port", "70000")
    assert result.returncode == 2 and "70000 is above the maximum 65535" in result.stderr
    assert '"loaded"' not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "body,message",
    [
        (b'[{"src": "a \\ud800 b", "id": 1}]', "lone UTF-16 surrogate (\\ud800)"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'[{"src": "w1", "id": 1, "x": NaN}]', "NaN is not a JSON number"),
    ],
)
def test_odd_text_and_json_get_a_400(server, body, message):
    status, answer = server.call("POST", "/translate", raw=body)
    assert status == 400 and message in answer["error"], answer
    assert healthy(server)


def test_an_nbest_with_impossible_hypotheses_is_answered_with_infinite_scores(server, models):
    """-inf scores (hypotheses of probability 0) are written as 1.x's server writes them
    (-Infinity, which Python's json reads back); the command line prints -inf for them."""
    sources = lines(models["sparse"]["src"])[:20]
    alone = Translator.load(models["sparse"]["model"], **SPARSE_OPT).translate(sources)
    assert any(math.isinf(score) for result in alone for score in result.scores)  # the case
    status, answer = server.call("POST", "/translate", [{"src": s, "id": SPARSE} for s in sources])
    assert status == 200
    for k, rank in enumerate(answer):
        for item, result in zip(rank, alone):
            if math.isinf(result.scores[k]):
                assert item["pred_score"] == -math.inf and item["tgt"] == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu 0 loads")
def test_a_clone_that_fails_to_load_leaves_nothing_behind(server):
    before = listed(server)
    status, answer = server.call("POST", f"/clone_model/{PLAIN}", {"opt": {"gpu": 0}})
    assert status == 400 and "CUDA" in answer["error"], answer
    assert listed(server) == before and healthy(server)


def post(server, data, limit_seconds=120):
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/translator/translate",
        data=data,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=limit_seconds) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_an_oversized_body_is_answered_413_to_urllib_and_curl(server, tmp_path):
    body = b'[{"src": "' + b"w1 " * 4_000_000 + b'", "id": 1}]'  # 12 MB, the limit is 1 MB
    status, answer = post(server, body)
    assert status == 413 and "limit of 1000000 bytes" in answer["error"]
    if shutil.which("curl"):  # curl asks "Expect: 100-continue" and sends no body
        path = tmp_path / "body.json"
        path.write_bytes(body)
        result = subprocess.run(
            [
                "curl",
                "-s",
                "-w",
                "\n%{http_code}",
                "--data-binary",
                f"@{path}",
                "-H",
                "Content-Type: application/json",
                f"http://127.0.0.1:{server.port}/translator/translate",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        text, code = result.stdout.rsplit("\n", 1)
        assert code == "413" and "limit of 1000000 bytes" in json.loads(text)["error"]
    assert healthy(server)


def test_a_request_that_times_out_ends_its_search_and_the_model_serves_on(server, models):
    """--request_timeout 3: a request of 500 sentences of 400 tokens each is answered 503, its
    search ends (the log says so), and the next request to that model is answered."""
    sources = lines(models["plain"]["src"])
    many = [{"src": s, "id": SLOW} for s in (sources * 13)[:500]]
    status, answer = server.call("POST", "/translate", many)
    assert status == 503 and "--request_timeout" in answer["error"]
    answers = {}
    threads = [
        threading.Thread(
            target=lambda i=i: answers.update(
                {i: server.call("POST", "/translate", [{"src": sources[i], "id": SLOW}])}
            )
        )
        for i in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(status == 200 and len(answer[0]) == 1 for status, answer in answers.values())
    assert healthy(server)
    assert any("of a request given up left the search" in line for line in server.log), server.log[
        -5:
    ]
