"""configure_cuda: TF32 and cuDNN's determinism set explicitly, and what training asks of it.

The flags are plain settings on a CPU-only torch too, so they can be set and read here.
"""

import pytest
import torch

from onmt_lite.train import main
from onmt_lite.utils.cuda import configure_cuda
from tests.helpers import TINY_MODEL, preprocess_in_process, train_in_process

FLAGS = (
    (torch.backends.cuda.matmul, "allow_tf32"),
    (torch.backends.cudnn, "allow_tf32"),
    (torch.backends.cudnn, "deterministic"),
    (torch.backends.cudnn, "benchmark"),
)


@pytest.fixture(autouse=True)
def restore_flags():
    saved = [getattr(module, name) for module, name in FLAGS]
    yield
    for (module, name), value in zip(FLAGS, saved):
        setattr(module, name, value)


def flags():
    return [getattr(module, name) for module, name in FLAGS]


def test_a_seeded_run_is_ieee_float32_deterministic_and_does_not_benchmark():
    for module, name in FLAGS:  # the opposite of what is expected, so the call must set each
        setattr(module, name, name != "deterministic")
    assert configure_cuda(seeded=True) == {
        "tf32": False,
        "cudnn_deterministic": True,
        "cudnn_benchmark": False,
    }
    assert flags() == [False, False, True, False]


def test_an_unseeded_run_may_benchmark_and_tf32_only_when_asked():
    for module, name in FLAGS:
        setattr(module, name, name == "deterministic")
    configure_cuda(seeded=False, tf32=True)
    assert flags() == [True, True, False, True]
    configure_cuda(seeded=False)
    assert flags()[:2] == [False, False]


class Configured(Exception):
    pass


@pytest.mark.parametrize(
    "args,expected",
    [
        (["-seed", "3"], (True, False)),
        ([], (False, False)),
        (["-seed", "3", "-model_dtype", "bf16"], (True, True)),
    ],
)
def test_training_on_cuda_configures_it_seeded_by_seed_and_tf32_by_bf16(
    tmp_path, monkeypatch, args, expected
):
    data = preprocess_in_process(str(tmp_path), n_train=20, n_valid=4)
    called = []

    def record(seeded, tf32=False):
        called.append((seeded, tf32))
        raise Configured  # no CUDA here: stop before the model goes to the device

    monkeypatch.setattr(main, "choose_device", lambda opt, dist: torch.device("cuda", 0))
    monkeypatch.setattr(main, "configure_cuda", record)
    with pytest.raises(Configured):
        train_in_process(data, str(tmp_path / "model"), *TINY_MODEL, *args)
    assert called == [expected]


def test_training_on_the_cpu_leaves_the_flags_alone(tmp_path, monkeypatch):
    data = preprocess_in_process(str(tmp_path), n_train=20, n_valid=4)
    monkeypatch.setattr(
        main, "configure_cuda", lambda *a, **k: pytest.fail("configure_cuda on the CPU")
    )
    train_in_process(data, str(tmp_path / "model"), *TINY_MODEL, "-seed", "1", "-train_steps", "1")


def test_translating_on_cuda_configures_it_seeded(monkeypatch):
    from onmt_lite.opts import build_parser, config_opts, parse, translate_opts
    from onmt_lite.translate import translator

    called = []

    def record(seeded, tf32=False):
        called.append((seeded, tf32))
        raise Configured  # before the checkpoint is read

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(translator, "configure_cuda", record)
    opt = parse(
        build_parser("t", [config_opts, translate_opts]),
        ["-model", "m.pt", "-src", "s.txt", "-gpu", "0"],
    )
    with pytest.raises(Configured):
        translator.Translator.from_opt(opt)
    assert called == [(True, False)]


@pytest.mark.parametrize(
    "args,expected",
    [
        ([], 30),  # OpenNMT-py 1.x's
        (["-gpu", "0"], 256),
        (["-gpu", "0", "-batch_type", "tokens"], 8192),
        (["-gpu", "0", "-batch_size", "7"], 7),
        (["-batch_size", "7"], 7),
    ],
)
def test_translation_batches_default_to_1x_size_on_the_cpu_and_to_a_larger_one_on_cuda(
    monkeypatch, args, expected
):
    from onmt_lite.opts import build_parser, config_opts, parse, translate_opts
    from onmt_lite.translate import translator

    sizes = []

    def record(batch_size, batch_type, beam):
        sizes.append(batch_size)
        raise Configured  # before the checkpoint is read

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(translator, "configure_cuda", lambda *a, **k: None)
    monkeypatch.setattr(translator, "decoding_rows", record)
    opt = parse(
        build_parser("t", [config_opts, translate_opts]), ["-model", "m.pt", "-src", "s.txt", *args]
    )
    with pytest.raises(Configured):
        translator.Translator.from_opt(opt)
    assert sizes == [expected]


def test_graph_recordings_take_turns_and_warm_up_on_one_stream_per_device(monkeypatch):
    """CUDA graph recordings (training's buckets, a search's step; the server's models in threads
    of their own) are one at a time in the process, and every recording on a device warms up on the
    same side stream (a stream each would leave cuBLAS a workspace each). torch.cuda.Stream stood in
    for: this CPU has no CUDA."""
    import threading
    import time

    from onmt_lite.utils import cuda

    made = []
    monkeypatch.setattr(torch.cuda, "Stream", lambda device: made.append(device) or object())
    monkeypatch.setattr(cuda, "_WARMUP_STREAMS", {})
    inside, most = [0], [0]

    def record(device):
        with cuda.graph_recording(torch.device(device)) as stream:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            time.sleep(0.01)
            inside[0] -= 1
            return stream

    threads = [threading.Thread(target=record, args=("cuda:0",)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 1
    assert record("cuda:0") is record("cuda:0") is not record("cuda:1")
    assert made == [torch.device("cuda:0"), torch.device("cuda:1")]
