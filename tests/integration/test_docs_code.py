"""Every Python block of README.md and docs/research.md runs as written (a trained model's path in
place of the demo's) and does what the text around it says."""

import os
import re

import pytest
import torch

from tests.helpers import REPO, TINY_MODEL, preprocess_in_process, train_in_process

DOCUMENTS = ("README.md", os.path.join("docs", "research.md"))
DEMO_MODEL = "data/cmudict/model_step_5000.pt"  # what `make demo` trains; a test trains its own


def python_blocks(document):
    with open(os.path.join(REPO, document), encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), re.S | re.M)


def trained_model(directory, *extra):
    data = preprocess_in_process(directory)
    save_model = os.path.join(directory, "model")
    train_in_process(data, save_model, *TINY_MODEL, "-train_steps", 2, "-seed", 1, *extra)
    return f"{save_model}_step_2.pt"


def run_translator_block(block, tmp_path):
    """README's "From Python": the n-best list of one source line, with its attention."""
    assert DEMO_MODEL in block
    model = trained_model(str(tmp_path))
    namespace = {}
    exec(compile(block.replace(DEMO_MODEL, model), "README.md", "exec"), namespace)
    result = namespace["result"]
    assert len(result.hypotheses) == 2 and len(result.scores) == 2  # n_best=2
    assert result.scores[0] >= result.scores[1]
    source_length = len("h e l l o".split())
    assert result.attention[0].shape[1] == source_length
    assert result.attention[0].shape[0] == len(result.hypotheses[0].split()) + 1


def run_loss_plugin_block(block, tmp_path):
    """research.md's plug-in: the block, saved as a file, trains as -loss_class with its option."""
    path = tmp_path / "focal_block.py"
    path.write_text(block, encoding="utf-8")
    model = trained_model(
        str(tmp_path), "-loss_class", f"{path}:FocalLossCompute", "-focal_gamma", 0.5
    )
    saved = torch.load(model, weights_only=True)["opt"]
    assert saved["loss_class"] == f"{path}:FocalLossCompute" and saved["focal_gamma"] == 0.5


RUNNERS = {"from onmt_lite import Translator": run_translator_block}
RUNNERS["from onmt_lite.loss import LossComputeBase"] = run_loss_plugin_block

BLOCKS = [
    pytest.param(block, id=f"{document}-{number}")
    for document in DOCUMENTS
    for number, block in enumerate(python_blocks(document), 1)
]


def test_the_documents_have_python_blocks():
    assert all(python_blocks(document) for document in DOCUMENTS)


@pytest.mark.parametrize("block", BLOCKS)
def test_a_python_block_of_the_docs_runs(block, tmp_path):
    runners = [run for marker, run in RUNNERS.items() if marker in block]
    assert len(runners) == 1, "a new Python block in the docs needs a runner in this test"
    runners[0](block, tmp_path)
