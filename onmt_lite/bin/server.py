"""onmt_lite_server: a translation server with OpenNMT-py 1.x's REST API (see onmt_lite.serve.app).

    onmt_lite_server --config available_models/conf.json --port 5000
    curl -X POST http://127.0.0.1:5000/translator/translate -d '[{"src": "h e l l o", "id": 100}]'

Sentences of concurrent requests for one model are decoded together, in one running search. It
listens on 127.0.0.1 unless --ip says otherwise. SIGTERM (or Ctrl-C) stops it gracefully: no new
connections, the requests in flight are answered (for up to --shutdown_timeout seconds), then it
exits 0. Each request is logged to stderr as one JSON line.
"""

import argparse
import signal
import socket

from onmt_lite.opts.parser import OptionParser, add
from onmt_lite.opts.values import MAX_PORT, float_in, int_in
from onmt_lite.serve.config import MAX_TIMEOUT, read_config
from onmt_lite.serve.models import ModelRegistry
from onmt_lite.utils.errors import UserError, run_command, set_debug
from onmt_lite.utils.logging import init_logger, logger
from onmt_lite.utils.memory import reuse_freed_memory

PROG = "onmt_lite_server"


def server_opts(parser):
    group = parser.add_argument_group("Server (OpenNMT-py 1.x's options)")
    add(group, "ip", default="127.0.0.1", help="Address to listen on (0.0.0.0: every interface)")
    add(
        group,
        "port",
        type=int_in(0, MAX_PORT),
        default=5000,
        help="TCP port (0: any free port, logged)",
    )
    add(group, "url_root", default="/translator", help="The endpoints' path prefix")
    add(
        group,
        "config",
        "-c",
        default="./available_models/conf.json",
        help="The models' configuration (OpenNMT-py 1.x's conf.json format)",
    )
    group = parser.add_argument_group("Limits")
    add(
        group,
        "max_request_bytes",
        type=int_in(1, 2**40),
        default=1_000_000,
        help="A request body longer than this is refused (413)",
    )
    add(
        group,
        "max_sentence_tokens",
        type=int_in(1, 10**6),
        default=1000,
        help="A request with a sentence of more source tokens than this is refused (400)",
    )
    add(
        group,
        "request_timeout",
        type=float_in(0, MAX_TIMEOUT),
        default=300.0,
        help="Seconds a translation may take before its request is answered 503",
    )
    add(
        group,
        "shutdown_timeout",
        type=float_in(0, MAX_TIMEOUT),
        default=30.0,
        help="On SIGTERM, seconds to let the requests in flight finish",
    )


def listening_socket(ip, port):
    """A socket bound to ``ip:port`` (a UserError if the address is taken or invalid)."""
    try:
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((ip, port))
    except OSError as err:
        raise UserError(
            f"--ip {ip} --port {port}: cannot listen there ({err.strerror or err})"
        ) from None
    sock.listen(2048)  # connections wait from now on, while the server starts
    return sock


def load_models(registry: ModelRegistry, config_path: str) -> None:
    """Load the models the configuration ``config_path`` marks ``load``, before the server listens;
    a model that fails is a UserError naming the file and the model."""
    for model in registry.models.values():
        if not model.spec.load:
            continue
        try:
            model.service.control("load").result()
        except UserError as err:
            raise UserError(f"{config_path}: model {model.spec.model_id}: {err}") from None
        fields = {"model_id": model.spec.model_id, "seconds": round(model.load_time, 2)}
        logger.info("loaded", extra={"fields": fields})


@run_command(PROG)
def main(args=None):
    parser = OptionParser(PROG, __doc__)  # its -debug also logs each request's and answer's body
    # 1.x's short form
    parser.add_argument("-d", dest="debug", action="store_true", help=argparse.SUPPRESS)
    server_opts(parser)
    opt, unknown = parser.parse_known_args(args)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    set_debug(opt.debug)
    init_logger(json_lines=True)
    reuse_freed_memory("cpu")
    import uvicorn  # here, not above: -h and option errors should not wait for it

    from onmt_lite.serve.app import create_app

    specs = read_config(opt.config)
    registry = ModelRegistry(specs, opt.max_sentence_tokens)
    try:
        load_models(registry, opt.config)
        sock = listening_socket(opt.ip, opt.port)
        host, port = sock.getsockname()[:2]
        app = create_app(
            registry, opt.url_root, opt.max_request_bytes, opt.request_timeout, opt.debug
        )
        config = uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=opt.shutdown_timeout,
            timeout_keep_alive=30,
        )
        server = uvicorn.Server(config)
        logger.info(
            "listening",
            extra={
                "fields": {
                    "url": f"http://{host}:{port}{opt.url_root}",
                    "models": sorted(registry.models),
                }
            },
        )
        # uvicorn stops gracefully on these signals, then raises them again under the handlers it
        # found: these, so that the command ends here, with its models closed and status 0
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: None)
        server.run(sockets=[sock])
    finally:
        registry.close(timeout=opt.shutdown_timeout)
    logger.info("stopped")


if __name__ == "__main__":
    main()
