# make demo: set everything up and run the demo on built-in data.  make test: run the test suite.  make lint: ruff.
# make test-kernels: the tests that depend on the CPU's kernels, under another kernel set (KERNELS=default).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := data/cmudict
DEMO_STEPS ?= 5000

KERNELS ?= default

.PHONY: install test test-fast test-kernels lint demo bench gpu-check gpu-bench gpu-translate-bench \
	gpu-profile clean

install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt
	$(BIN)/pip install -q --disable-pip-version-check -e .
	touch $@

$(VENV)/.demo: $(VENV)/.installed
	$(BIN)/pip install -q --disable-pip-version-check -e '.[demo]'
	touch $@

test: $(VENV)/.demo
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# The unit contract alone, 1.5 minutes on 2 cores: the tests not marked slow (tests/conftest.py).
test-fast: $(VENV)/.demo
	$(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow"

# The tests marked kernels (trained models held to a quality, translations compared) again, under
# another of PyTorch's CPU kernel sets: a test tuned to one CPU's rounding fails here too.
test-kernels: $(VENV)/.demo
	ATEN_CPU_CAPABILITY=$(KERNELS) $(BIN)/python -m pytest -q -n auto --dist loadfile -m kernels

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

demo: $(VENV)/.demo
	$(BIN)/python tools/prepare_cmudict.py -output_dir $(DEMO)
	$(BIN)/onmt_lite_preprocess -train_src $(DEMO)/src-train.txt -train_tgt $(DEMO)/tgt-train.txt \
		-valid_src $(DEMO)/src-valid.txt -valid_tgt $(DEMO)/tgt-valid.txt \
		-save_data $(DEMO)/demo -overwrite
	$(BIN)/onmt_lite_train -data $(DEMO)/demo -save_model $(DEMO)/model -log_file $(DEMO)/train.log \
		-encoder_type brnn -layers 2 -rnn_size 256 -word_vec_size 64 -global_attention general \
		-optim adam -learning_rate 0.002 -dropout 0.2 -batch_size 64 -seed 1 \
		-train_steps $(DEMO_STEPS) -valid_steps 500 -save_checkpoint_steps 500 -keep_checkpoint 1 -report_every 100 -overwrite
	$(BIN)/onmt_lite_translate -model $(DEMO)/model_step_$(DEMO_STEPS).pt -src $(DEMO)/src-test.txt \
		-tgt $(DEMO)/tgt-test.txt -output $(DEMO)/pred-test.txt -beam_size 5 -batch_size 64 -report_time
	$(BIN)/python tools/g2p_scores.py -src $(DEMO)/src-test.txt -hyp $(DEMO)/pred-test.txt -ref $(DEMO)/tgt-test.txt
	$(BIN)/python tools/plot_training.py -log $(DEMO)/train.log -output $(DEMO)/training.png
	@echo
	@echo "Model:       $(DEMO)/model_step_$(DEMO_STEPS).pt (best on validation: $(DEMO)/model_best.pt)"
	@echo "Log, plot:   $(DEMO)/train.log, $(DEMO)/training.png"
	@echo "Predictions: $(DEMO)/pred-test.txt (references: $(DEMO)/tgt-test.txt)"
	@echo
	@echo "Go on training to step 10000:"
	@echo "  $(BIN)/onmt_lite_train -data $(DEMO)/demo -save_model $(DEMO)/model -log_file $(DEMO)/train.log -dropout 0.2 -train_from $(DEMO)/model_step_$(DEMO_STEPS).pt -train_steps 10000 -valid_steps 500 -save_checkpoint_steps 500"
	@echo "Translate new words (letters separated by spaces, one word a line):"
	@echo "  echo 'h e l l o' > words.txt"
	@echo "  $(BIN)/onmt_lite_translate -model $(DEMO)/model_step_$(DEMO_STEPS).pt -src words.txt -output phones.txt && cat phones.txt"

# Side by side with OpenNMT-py 3.5.1 (installed into /tmp/peer-opennmt on first use); about 2.5 hours on 2 cores.
bench: $(VENV)/.demo
	$(BIN)/python bench/train_speed.py
	$(BIN)/python bench/precision_curve.py
	$(BIN)/python bench/translate_speed.py
	$(BIN)/python bench/shard_memory.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/roofline.py

# The CUDA checks (bench/README.md), on a machine with CUDA: a PASS/FAIL table, exit 1 on a FAIL.
# GPU_CHECK="-device cpu -quick" dry-runs them on a CPU; "-steps 300" or "-checks abf" cut them.
gpu-check: $(VENV)/.installed
	$(BIN)/python bench/gpu_check.py $(GPU_CHECK)

# Training speed and memory against OpenNMT-py 3.5.1 on one CUDA device (bench/gpu_speed.py; the
# peer is installed into /tmp/peer-opennmt on first use). GPU_BENCH="-dry_run -only rnn64" dry-runs
# onmt_lite's commands on a CPU; without CUDA and without -dry_run it exits 2.
gpu-bench: $(VENV)/.demo
	$(BIN)/python bench/gpu_speed.py $(GPU_BENCH)

# Translation speed against OpenNMT-py 3.5.1 on one CUDA device (bench/gpu_translate_speed.py: the
# same Transformer weights in both, fp32/fp16/bf16). GPU_TRANSLATE_BENCH="-dry_run" dry-runs
# onmt_lite's commands on a CPU; without CUDA and without -dry_run it exits 2.
gpu-translate-bench: $(VENV)/.demo
	$(BIN)/python bench/gpu_translate_speed.py $(GPU_TRANSLATE_BENCH)

# Where a GPU training step's time goes (bench/gpu_profile.py: torch.profiler over onmt_lite's steps;
# GPU_PROFILE="-translate MODEL" adds decoding). GPU_PROFILE="-dry_run" profiles the CPU instead;
# without CUDA and without -dry_run it exits 2.
gpu-profile: $(VENV)/.installed
	$(BIN)/python bench/gpu_profile.py $(GPU_PROFILE)

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
