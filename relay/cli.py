"""``sapo-relay``: run the relay from the command line.

Bad input (a bad port, an unusable data dir, a port in use) prints one line on
stderr and exits non-zero; SIGTERM and SIGINT stop the relay cleanly (connections
closed with 1001, stats flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import base64
import binascii
import logging
import math
import os
import signal
import socket
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import platformdirs

from relay.backend import Unavailable
from relay.manifest_key import read_handovers, read_manifest_key
from relay.pool import PoolLimits
from relay.server import Relay, RelayConfig
from relay.swarms import load_swarms
from relay.tls import TLSSetupError, server_context
from wire import identity as ident

PROG = "sapo-relay"
log = logging.getLogger("relay")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, not usage + traceback-looking noise.
        self.exit(2, f"{self.prog}: {message} (see --help)\n")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a number, not {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, not {port}")
    return port


def _host(text: str) -> str:
    # An empty host would make asyncio listen on every interface: say so explicitly or not at all.
    if not text.strip():
        raise argparse.ArgumentTypeError("must name an interface: 127.0.0.1 for this machine, 0.0.0.0 for every one")
    return text


def _directory(text: str) -> Path:
    if not text.strip():  # Path("") is the working directory: a stats database dropped wherever the relay started
        raise argparse.ArgumentTypeError("must name a directory, not ''")
    return Path(text)


def _positive(kind: type[int] | type[float]):  # type: ignore[no-untyped-def]
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            whole = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {whole}, not {text!r}") from None
        if not 0 < value < math.inf:  # inf would switch a limit off (a hello timeout that never comes)
            raise argparse.ArgumentTypeError(f"must be a positive finite number, not {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    d = RelayConfig(data_dir=Path("."))
    pool = PoolLimits()
    ap = _Parser(prog=PROG, description="The SAPO Swarm relay: nodes share rollouts through it.")
    ap.add_argument("--host", type=_host, default="127.0.0.1", help="interface to listen on (default: %(default)s)")
    ap.add_argument("--port", type=_port, default=8765, help="TCP port, 0 for any free one (default: %(default)s)")
    ap.add_argument(
        "--data-dir",
        type=_directory,
        default=Path(platformdirs.user_data_dir("sapo-relay")),
        help="where the stats database lives (default: %(default)s)",
    )
    ap.add_argument(
        "--token",
        default=os.environ.get("SAPO_RELAY_TOKEN"),
        help="shared secret nodes must send in hello (default: $SAPO_RELAY_TOKEN, else none)",
    )
    ap.add_argument("--pool-max-groups", type=_positive(int), default=pool.max_groups, help="groups kept per swarm")
    ap.add_argument("--pool-max-bytes", type=_positive(int), default=pool.max_bytes, help="pool bytes, all swarms")
    ap.add_argument("--pool-max-age-s", type=_positive(float), default=pool.max_age_s, help="oldest group kept (s)")
    ap.add_argument("--pool-per-author", type=_positive(int), default=pool.per_author,
                    help="groups kept per author per swarm; its oldest go first (default: %(default)s)")
    ap.add_argument("--groups-per-minute", type=_positive(int), default=pool.groups_per_minute,
                    help="groups one author may publish per minute (default: %(default)s)")
    ap.add_argument("--seen-max", type=_positive(int), default=pool.seen_max,
                    help="content digests remembered after their group left the pool, so a later copy is refused "
                         "(all swarms; default: %(default)s)")
    ap.add_argument("--seen-max-age-s", type=_positive(float), default=pool.seen_max_age_s,
                    help="how long such a digest is remembered at most (s; default: %(default)s)")
    ap.add_argument("--max-completions", type=_positive(int), default=d.max_completions, help="completions per group")
    ap.add_argument("--max-completion-chars", type=_positive(int), default=d.max_completion_chars)
    ap.add_argument("--max-question-chars", type=_positive(int), default=d.max_question_chars)
    ap.add_argument(
        "--allow-keys",
        type=Path,
        metavar="FILE",
        help="admit only these nodes: one node id (32 hex) or Ed25519 public key (64 hex or base64) per line",
    )
    ap.add_argument("--rate", type=_positive(float), default=d.rate_per_s, help="messages/s per connection")
    ap.add_argument("--burst", type=_positive(int), default=d.burst, help="message burst per connection")
    ap.add_argument("--bytes-rate", type=_positive(float), default=d.bytes_per_s, help="bytes/s per connection")
    ap.add_argument("--error-rate", type=_positive(float), default=d.error_per_s, help="refused frames/s tolerated")
    ap.add_argument("--error-burst", type=_positive(int), default=d.error_burst, help="refused frames before a close")
    ap.add_argument("--hello-timeout-s", type=_positive(float), default=d.hello_timeout_s)
    ap.add_argument("--max-peers", type=_positive(int), default=d.max_peers)
    ap.add_argument("--max-peers-per-address", type=_positive(int), default=None,
                    help="connections admitted from one IP address (default: no cap)")
    ap.add_argument("--max-swarms", type=_positive(int), default=d.max_swarms)
    ap.add_argument("--seed", type=int, default=None,
                    help="seed the pool's sampling, per swarm, so the same requests get the same groups (experiments "
                         "and tests; a public relay leaves it unset)")
    ap.add_argument("--compression", action="store_true", help="enable permessage-deflate (costs relay CPU)")
    ap.add_argument("--redis", metavar="URL", default=os.environ.get("SAPO_RELAY_REDIS"),
                    help="keep the pool and stats in Redis, redis://HOST:PORT/DB, shared by every relay replica "
                         "given the same URL (default: $SAPO_RELAY_REDIS, else in this process and SQLite)")
    ap.add_argument("--redis-prefix", default=d.redis_prefix,
                    help="prefix of this relay's Redis keys (default: %(default)s)")
    ap.add_argument("--tls-cert", type=Path, metavar="FILE",
                    help="PEM certificate (then any intermediates): serve wss:// and https:// (needs --tls-key)")
    ap.add_argument("--tls-key", type=Path, metavar="FILE", help="PEM private key of --tls-cert, unencrypted")
    ap.add_argument("--swarms", type=Path, metavar="FILE.toml",
                    help="serve only the swarms this file declares, each with its task mix (manifest) that joining "
                         "nodes follow, public (listed at /swarms) or private (its own token); docs/DEPLOY.md")
    ap.add_argument("--manifest-key", type=Path, metavar="FILE",
                    help="sign the --swarms manifests with this Ed25519 key (PEM; make one with `sapo-relay keygen "
                         "FILE`): nodes whose invite pins its signer follow only manifests it signed")
    ap.add_argument("--manifest-key-handover", type=Path, metavar="FILE",
                    help="the handover from the previous manifest key to --manifest-key (`sapo-relay handover OLD "
                         "NEW FILE`): nodes that pin or joined with the old key follow the new one")
    ap.add_argument("--no-status-page", dest="status_page", action="store_false",
                    help="do not serve the public status page (/, /swarm/NAME, /api/...)")
    ap.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return ap


def read_allowed_keys(path: Path) -> frozenset[str]:
    """Node ids from an allow-list file; ValueError (naming the line) on anything else."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read --allow-keys {path}: {getattr(exc, 'strerror', None) or exc}") from None
    ids = set()
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        node_id = _node_id_of(line)
        if node_id is None:
            raise ValueError(f"--allow-keys {path}:{number}: not a node id or an Ed25519 public key: {line[:70]!r}")
        ids.add(node_id)
    if not ids:
        raise ValueError(f"--allow-keys {path} lists no keys: nobody could connect")
    return frozenset(ids)


def _node_id_of(text: str) -> str | None:
    if ident.is_node_id(text):
        return text
    for decode in (bytes.fromhex, lambda t: base64.b64decode(t, validate=True)):
        try:
            key = decode(text)
        except (ValueError, binascii.Error):
            continue
        if len(key) == ident.PUBLIC_KEY_BYTES:
            return ident.node_id_for(key)
    return None


def config_from_args(args: argparse.Namespace) -> RelayConfig:
    """The relay's config; ValueError (one line) on a bad value, an unusable certificate or key included."""
    config = _config(args)
    if args.swarms is not None:
        swarms, notes = load_swarms(args.swarms, config.token)
        for note in notes:
            log.warning("%s", note)
        config = dataclasses.replace(config, swarms=swarms)
    if args.manifest_key is not None:
        if config.swarms is None:
            raise ValueError("--manifest-key signs the manifests of --swarms FILE.toml: give that too")
        key, notes = read_manifest_key(args.manifest_key)
        for note in notes:
            log.warning("%s", note)
        config = dataclasses.replace(config, manifest_key=key)
    if args.manifest_key_handover is not None:
        if config.manifest_key is None:
            raise ValueError("--manifest-key-handover hands over to the --manifest-key: give that too")
        config = dataclasses.replace(config, manifest_handovers=read_handovers(args.manifest_key_handover,
                                                                                config.manifest_key.public_key))
    if config.tls_cert is not None and config.tls_key is not None:
        server_context(config.tls_cert, config.tls_key)  # now, so a bad pair is exit 2 before anything starts
    return config


def _config(args: argparse.Namespace) -> RelayConfig:
    return RelayConfig(
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        token=args.token or None,
        allowed_keys=read_allowed_keys(args.allow_keys) if args.allow_keys else None,
        pool=PoolLimits(args.pool_max_groups, args.pool_max_bytes, args.pool_max_age_s, args.pool_per_author,
                        args.groups_per_minute, args.seen_max, args.seen_max_age_s),
        max_completions=args.max_completions,
        max_completion_chars=args.max_completion_chars,
        max_question_chars=args.max_question_chars,
        rate_per_s=args.rate,
        burst=args.burst,
        bytes_per_s=args.bytes_rate,
        error_per_s=args.error_rate,
        error_burst=args.error_burst,
        hello_timeout_s=args.hello_timeout_s,
        max_peers=args.max_peers,
        max_peers_per_address=args.max_peers_per_address,
        max_swarms=args.max_swarms,
        compression=args.compression,
        redis_url=args.redis or None,
        redis_prefix=args.redis_prefix,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        status_page=args.status_page,
        seed=args.seed,
    )


def _check_data_dir(path: Path) -> None:
    """Fail early, with the path in the message, if the stats database cannot live there."""
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=path):
        pass


async def _run(config: RelayConfig) -> None:
    relay = Relay(config)
    await relay.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("signal received, shutting down")
    finally:
        await relay.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["invite"]:
        from relay.invite_cmd import invite_main

        return invite_main(argv[1:], PROG)
    if argv[:1] == ["keygen"]:
        from relay.manifest_key import keygen_main

        return keygen_main(argv[1:], PROG)
    if argv[:1] == ["handover"]:
        from relay.manifest_key import handover_main

        return handover_main(argv[1:], PROG)
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # websockets logs every handshake failure at INFO; at 1000 peers that drowns ours.
    logging.getLogger("websockets").setLevel(logging.DEBUG if args.log_level == "DEBUG" else logging.WARNING)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        _check_data_dir(config.data_dir)
    except OSError as exc:
        print(f"{PROG}: cannot use data dir {config.data_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        asyncio.run(_run(config))
    except Unavailable as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except TLSSetupError as exc:  # the files changed after the check above
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except sqlite3.Error as exc:
        print(f"{PROG}: cannot open the stats database in {config.data_dir}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if isinstance(exc, socket.gaierror):  # its errno is a resolver code: os.strerror reads "Unknown error -2"
            why = f"no such host or interface ({exc.strerror})"
        else:
            why = os.strerror(exc.errno) if exc.errno else str(exc)
        print(f"{PROG}: cannot listen on {config.host}:{config.port}: {why}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
