# make demo: set everything up and run the demo on built-in data.  make test: run the test suite.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO := data/cmudict

.PHONY: install test demo clean

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
	$(BIN)/python -m pytest -q

demo: $(VENV)/.demo
	$(BIN)/python tools/prepare_cmudict.py -output_dir $(DEMO)
	$(BIN)/onmt_lite_preprocess -train_src $(DEMO)/src-train.txt -train_tgt $(DEMO)/tgt-train.txt \
		-valid_src $(DEMO)/src-valid.txt -valid_tgt $(DEMO)/tgt-valid.txt \
		-save_data $(DEMO)/demo -dynamic_dict -overwrite
	@echo "Demo data in $(DEMO)/:"; ls -l $(DEMO)

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache
