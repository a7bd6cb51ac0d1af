"""The server's models: each ModelSpec with its TranslationService, found by id; clones."""

import copy
import os
import threading
import time

import torch

from onmt_lite.serve.config import PATH_OPTIONS, ModelSpec, seconds, translation_options
from onmt_lite.translate.loading import idle_translation_options
from onmt_lite.translate.service import TranslationService
from onmt_lite.translate.translator import Translator
from onmt_lite.utils.errors import UserError
from onmt_lite.utils.logging import logger


class UnknownModel(UserError):
    """A request named a model id the server does not have."""


class ServedModel:
    """A model of the server: its spec and the TranslationService that decodes its requests."""

    def __init__(self, spec: ModelSpec, max_tokens: int):
        self.spec = spec
        for note in idle_translation_options(spec.opt):  # once: the model may load many times
            logger.warning(note, extra={"fields": {"model_id": spec.model_id}})
        self.load_time = None
        self.service = TranslationService(
            self._load,
            spec.opt.gpu,
            max_tokens,
            spec.timeout,
            spec.on_timeout,
            name=f"model {spec.model_id}",
        )

    def _load(self, device):
        """A Translator of the spec's options, on ``device`` (None: the one configured)."""
        opt = copy.copy(self.spec.opt)
        if device is not None:
            device = torch.device(device)
            opt.gpu = -1 if device.type == "cpu" else device.index
            if device.type == "cpu":  # CUDA's options left out while the model is on the CPU
                if opt.precision == "fp16":
                    opt.precision = "fp32"
                opt.cuda_graphs = False
        start = time.time()
        translator = Translator.from_opt(opt)
        self.load_time = time.time() - start
        return translator

    def to_dict(self):
        return self.spec.to_dict(self.service.loaded)


class ModelRegistry:
    """The models by id. ``max_tokens``: the longest sentence (in tokens) a request may hold."""

    def __init__(self, specs, max_tokens):
        self.max_tokens = max_tokens
        self.models = {spec.model_id: ServedModel(spec, max_tokens) for spec in specs}
        self._lock = threading.Lock()

    def get(self, model_id) -> ServedModel:
        model = self.models.get(model_id)
        if model is None:
            raise UnknownModel(
                f"no model with id {model_id!r} (this server has {sorted(self.models)})"
            )
        return model

    def clone(self, model_id, user_opt=None, timeout=-1) -> ServedModel:
        """A new model with ``model_id``'s checkpoints and tokenizer and other translation options
        (``user_opt``, checked like the command line's; None: the same), under the next free id."""
        source = self.get(model_id).spec
        if user_opt is not None:
            if not isinstance(user_opt, dict):
                raise UserError("\"opt\" must be an object of translation options")
            named = sorted(set(user_opt) & set(PATH_OPTIONS))
            if named:
                raise UserError(
                    f"a clone's options may not name files ({', '.join(named)}): only the "
                    f"configuration does"
                )
        user_opt = dict(source.user_opt if user_opt is None else user_opt)
        timeout = seconds(timeout, "timeout", f"clone of model {model_id}")
        with self._lock:
            new_id = max(self.models) + 1
            opt = translation_options(
                user_opt,
                [os.path.join(source.root, p) for p in source.paths],
                source.root,
                f"clone of model {model_id}",
            )
            if source.tokenizer is not None:  # the clone tokenizes as its model does
                opt.src_spm = source.opt.src_spm
                opt.tgt_spm = source.opt.tgt_spm
            spec = ModelSpec(
                new_id,
                source.paths,
                source.root,
                user_opt,
                opt,
                source.tokenizer,
                True,
                timeout,
                source.on_timeout,
            )
            self.models[new_id] = ServedModel(spec, self.max_tokens)
        return self.models[new_id]

    def remove(self, model_id: int) -> None:
        """Take a model out (a clone that failed to load): it is no longer listed nor served."""
        with self._lock:
            model = self.models.pop(model_id, None)
        if model is not None:
            model.service.close()

    def close(self, timeout=None):
        for model in self.models.values():
            model.service.close(timeout)
