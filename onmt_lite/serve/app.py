"""The HTTP API of ``onmt_lite_server``: OpenNMT-py 1.x's endpoints and JSON, on Starlette.

    POST {url_root}/translate           [{"src": "text", "id": 100}, ...]
                                        -> [[{"src", "tgt", "n_best", "pred_score"}, ...], ...]
                                           (a list per n-best rank, each in request order)
    GET  {url_root}/models              -> [{"model_id", "opt", "models", "loaded", "timeout"}, ...]
    GET  {url_root}/health              -> {"status": "ok"}
    GET  {url_root}/unload_model/ID     -> {"status": "ok", "model_id": ID}    (POST too)
    GET  {url_root}/to_cpu/ID, /to_gpu/ID                                      (POST too)
    POST {url_root}/clone_model/ID      {"opt": {...}, "timeout": T}
                                        -> {"status": "ok", "model_id", "load_time"}

Unlike 1.x, a bad request is answered with a 4xx status (1.x: 200), its JSON body still 1.x's
``{"status": "error", "error": MESSAGE}``. Every request is logged as one JSON line.
"""

import asyncio
import logging
import re
import time

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from onmt_lite.serve.json_text import AnswerJSON, loads_strict
from onmt_lite.serve.models import UnknownModel
from onmt_lite.utils.errors import UserError

logger = logging.getLogger("onmt_lite.server")
REQUEST_KEYS = {"src", "id"}
DISCARD_FACTOR = 20  # how much of an oversized body is read to answer 413 (see read_json)


class HTTPError(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


async def read_json(request, limit):
    """The request's JSON body; 413 past ``limit`` bytes, 400 if not JSON (see ``loads_strict``).

    The rest of a body over the limit is read and dropped (up to ``DISCARD_FACTOR`` times the
    limit) before the answer: a client that sends its whole body before it reads (urllib,
    requests) then reads the 413, where a connection closed under its upload is a reset to it. A
    client that asked ``Expect: 100-continue`` (curl) has sent nothing yet and is not asked to."""
    length = request.headers.get("content-length", "")
    declared = int(length) if length.isdigit() else 0
    too_long = f"has {declared} bytes, more than" if declared > limit else ""
    if too_long and "100-continue" in request.headers.get("expect", "").lower():
        raise HTTPError(
            413, f"the body {too_long} this server's limit of {limit} bytes (--max_request_bytes)"
        )
    body = bytearray()
    read = 0
    async for chunk in request.stream():
        read += len(chunk)
        if read > DISCARD_FACTOR * limit:
            break
        if read <= limit and not too_long:
            body += chunk
    if too_long or read > limit:
        raise HTTPError(
            413,
            f"the body {too_long or 'is longer than'} this server's limit of "
            f"{limit} bytes (--max_request_bytes)",
        )
    if not body:
        raise HTTPError(400, "the body is empty; expected JSON")
    try:
        return loads_strict(body)
    except ValueError as err:
        raise HTTPError(400, f"the body is not valid JSON ({err})") from None


def translation_inputs(inputs):
    """``(model id, sources)`` of a translate request, checked: 1.x's list of ``{"src", "id"}``."""
    if not isinstance(inputs, list) or not inputs:
        raise HTTPError(400, "expected a non-empty list of {\"src\": text, \"id\": model id}")
    ids = set()
    for i, item in enumerate(inputs):
        if not isinstance(item, dict):
            raise HTTPError(
                400, f"item {i}: expected an object {{\"src\": text, \"id\": model id}}"
            )
        unknown = set(item) - REQUEST_KEYS
        if unknown:
            raise HTTPError(
                400,
                f"item {i}: unknown key(s) {', '.join(sorted(map(repr, unknown)))} "
                f"(this server reads \"src\" and \"id\")",
            )
        if not isinstance(item.get("src"), str):
            raise HTTPError(
                400,
                f"item {i}: \"src\" must be a string" if "src" in item else f"item {i}: no \"src\"",
            )
        model_id = item.get("id", 0)  # 1.x's default
        if isinstance(model_id, bool) or not isinstance(model_id, int):
            raise HTTPError(400, f"item {i}: \"id\" must be a whole number")
        ids.add(model_id)
    if len(ids) > 1:
        raise HTTPError(400, f"one request, one model: the items name models {sorted(ids)}")
    return ids.pop(), [item["src"] for item in inputs]


def _spaces(text):
    """The leading and trailing white space of ``text`` (1.x puts them around the translation)."""
    head = re.match(r"\s*", text).group(0)
    return head, text[len(head) :][len(text[len(head) :].rstrip()) :]


def endpoint(handler):
    """An endpoint running ``handler(request, fields)`` for a JSON answer: errors become a JSON
    error with their status; one log line a request, with the ``fields`` the handler filled in."""

    async def wrapped(request):
        start = time.perf_counter()
        status = 200
        fields = {}
        response = None
        try:
            response = AnswerJSON(await handler(request, fields))
        except HTTPError as err:
            status = err.status
            fields["error"] = str(err)
        except UnknownModel as err:
            status = 404
            fields["error"] = str(err)
        except UserError as err:
            status = 400
            fields["error"] = str(err)
        except ClientDisconnect:
            status = 499
            fields["error"] = "the client disconnected"
            response = Response(status_code=499)
        except (
            Exception
        ) as err:  # a bug or a failed model: the client hears of it, the server goes on
            logger.exception("internal error")
            status = 500
            fields["error"] = f"internal error: {type(err).__name__}: {err}"
        if response is None:
            response = JSONResponse(
                {"status": "error", "error": fields["error"]}, status_code=status
            )
        logger.info(
            "request",
            extra={
                "fields": {
                    "method": request.method,
                    "path": request.url.path,
                    "status": status,
                    "ms": round(1000 * (time.perf_counter() - start), 1),
                    **fields,
                }
            },
        )
        return response

    return wrapped


def answer(sources, results, n_best):
    """1.x's answer: a list per n-best rank, each with an item per source, in order."""
    out = []
    for k in range(n_best):
        rank = []
        for source, result in zip(sources, results):
            head, tail = _spaces(source)
            rank.append(
                {
                    "src": source,
                    "tgt": head + result.hypotheses[k] + tail,
                    "n_best": n_best,
                    "pred_score": result.scores[k],
                }
            )
        out.append(rank)
    return out


class Endpoints:
    """The handlers of the endpoints, over a ModelRegistry (see ``create_app``)."""

    def __init__(self, registry, max_request_bytes, request_timeout, debug):
        self.registry = registry
        self.max_request_bytes = max_request_bytes
        self.request_timeout = request_timeout
        self.debug = debug

    async def translate(self, request, fields):
        inputs = await read_json(request, self.max_request_bytes)
        if self.debug:
            logger.info("translate request", extra={"fields": {"body": inputs}})
        model_id, sources = translation_inputs(inputs)
        fields.update(model_id=model_id, sentences=len(sources))
        model = self.registry.get(model_id)
        future = model.service.translate(sources)
        try:
            results = await asyncio.wait_for(asyncio.wrap_future(future), self.request_timeout)
        except asyncio.TimeoutError:
            model.service.cancel(future)  # its sentences leave the search: the model serves on
            raise HTTPError(
                503,
                f"the translation took longer than {self.request_timeout:g} s (--request_timeout)",
            ) from None
        except asyncio.CancelledError:  # the server is stopping and no longer waits for it
            model.service.cancel(future)
            raise
        out = answer(sources, results, model.spec.opt.n_best)
        if self.debug:
            logger.info("translate response", extra={"fields": {"body": out}})
        return out

    async def models(self, request, fields):
        return [model.to_dict() for model in list(self.registry.models.values())]  # clones come

    async def health(self, request, fields):
        return {"status": "ok"}

    def control(self, action):
        """The handler of ``action`` (unload, to_cpu, to_gpu) on the model of the path's id."""

        async def handler(request, fields):
            model_id = fields["model_id"] = request.path_params["model_id"]
            await asyncio.wrap_future(self.registry.get(model_id).service.control(action))
            return {"status": "ok", "model_id": model_id}

        return handler

    async def clone_model(self, request, fields):
        data = await read_json(request, self.max_request_bytes)
        if not isinstance(data, dict) or set(data) - {"opt", "timeout"}:
            raise HTTPError(
                400,
                "expected {\"opt\": {translation options}, \"timeout\": seconds}, both optional",
            )
        clone = await asyncio.to_thread(
            self.registry.clone,
            request.path_params["model_id"],
            data.get("opt"),
            data.get("timeout", -1),
        )
        try:
            await asyncio.wrap_future(clone.service.control("load"))
        except BaseException:  # a clone that did not load leaves nothing behind
            await asyncio.to_thread(self.registry.remove, clone.spec.model_id)
            raise
        fields["model_id"] = clone.spec.model_id
        return {"status": "ok", "model_id": clone.spec.model_id, "load_time": clone.load_time}


async def not_found(request, exc):
    status = getattr(exc, "status_code", 404)
    message = (
        "no such endpoint" if status == 404 else "method not allowed" if status == 405 else str(exc)
    )
    return JSONResponse(
        {"status": "error", "error": f"{message}: {request.method} {request.url.path}"},
        status_code=status,
    )


def create_app(
    registry,
    url_root="/translator",
    max_request_bytes=1_000_000,
    request_timeout=300.0,
    debug=False,
):
    """The Starlette application serving ``registry`` (a ModelRegistry) under ``url_root``."""
    root = "/" + url_root.strip("/") if url_root.strip("/") else ""
    api = Endpoints(registry, max_request_bytes, request_timeout, debug)
    routes = [
        Route(f"{root}/translate", endpoint(api.translate), methods=["POST"]),
        Route(f"{root}/models", endpoint(api.models), methods=["GET"]),
        Route(f"{root}/health", endpoint(api.health), methods=["GET"]),
        Route(f"{root}/clone_model/{{model_id:int}}", endpoint(api.clone_model), methods=["POST"]),
    ]
    for action, name in (("unload", "unload_model"), ("to_cpu", "to_cpu"), ("to_gpu", "to_gpu")):
        routes.append(
            Route(
                f"{root}/{name}/{{model_id:int}}",
                endpoint(api.control(action)),
                methods=["GET", "POST"],
            )
        )
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found})
