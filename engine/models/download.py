"""Getting a catalog model's GGUF file onto this machine.

Downloads go through huggingface_hub into its standard cache, so a model fetched once is
shared with every other tool on the machine and never fetched twice. A file already in
the cache is returned without any network request (works offline, starts fast).

Note on resuming: huggingface_hub (>= 1.x) retries a dropped transfer inside one call
with an HTTP Range request, but it discards a partial file when the call fails, so an
interrupted run starts that file again. Repos stored on Xet fetch in chunks via hf_xet.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from tqdm.auto import tqdm as _tqdm

from engine.models.catalog import CatalogEntry
from engine.errors import SapoError, first_line
from engine.models.modelfile import GGUFInfo, bundled_model_path, inspect_gguf

DEFAULT_ENDPOINT = "https://huggingface.co"
REVISION = "main"

# progress: True = huggingface_hub's tqdm bar (on a terminal), False = silent, or a
# callback (bytes_done, bytes_total_or_None) for the GUI's event stream.
Progress = bool | Callable[[int, int | None], None]


def ensure_model(entry: CatalogEntry, cache_dir: str | os.PathLike[str] | None = None, progress: Progress = True,
                 *, endpoint: str | None = None) -> Path:
    """Path of the entry's GGUF file, downloading it into the Hugging Face cache if needed.

    endpoint (or the HF_ENDPOINT environment variable, read at call time) points at a
    Hub mirror. Every failure is a one-line SapoError; the result is validated as GGUF.
    """
    if entry.source == "bundled":
        path = bundled_model_path()
        inspect_gguf(path)
        return path
    if entry.source == "local":
        if entry.local_path is None:
            raise SapoError(f"model '{entry.name}' has no local path")
        inspect_gguf(entry.local_path)
        return Path(entry.local_path)
    if not entry.repo_id:
        raise SapoError(f"model '{entry.name}' has no download source")

    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    base = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    cache = str(Path(cache_dir).expanduser()) if cache_dir is not None else None
    what = f"{entry.filename} from {base}/{entry.repo_id}"

    cached = try_to_load_from_cache(entry.repo_id, entry.filename, cache_dir=cache, revision=REVISION)
    if isinstance(cached, str) and Path(cached).is_file():
        try:
            _validate(Path(cached))
            return Path(cached)
        except SapoError:
            _discard(Path(cached))  # a damaged cache entry: fetch it again below

    if offline_mode():
        raise SapoError(f"{entry.display_name} is not downloaded yet and offline mode is on (HF_HUB_OFFLINE); "
                        f"go online once or pass a local .gguf path")
    try:
        path = Path(hf_hub_download(
            entry.repo_id, entry.filename, revision=REVISION, cache_dir=cache, endpoint=base,
            tqdm_class=_bar_class(progress),
        ))
    except SapoError:
        raise
    except Exception as exc:  # huggingface_hub and httpx raise many types; all mean "not downloaded"
        raise SapoError(f"could not download {what}: {_reason(exc)}") from None
    try:
        _validate(path)
    except SapoError as exc:
        _discard(path)
        raise SapoError(f"downloaded {what} but it is unusable ({exc}); removed it, try again") from None
    return path


def cached_path(entry: CatalogEntry, cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The entry's file when it is on this machine already (bundled, local, or in the Hub cache); no network."""
    if entry.source == "bundled":
        return bundled_model_path()
    if entry.source == "local":
        return Path(entry.local_path) if entry.local_path is not None and Path(entry.local_path).is_file() else None
    if not entry.repo_id:
        return None
    from huggingface_hub import try_to_load_from_cache

    cache = str(Path(cache_dir).expanduser()) if cache_dir is not None else None
    found = try_to_load_from_cache(entry.repo_id, entry.filename, cache_dir=cache, revision=REVISION)
    return Path(found) if isinstance(found, str) and Path(found).is_file() else None


def hub_reachable(endpoint: str | None = None, timeout_s: float = 3.0) -> bool:
    """Whether the Hub answers a TCP connection within ``timeout_s`` (offline mode: False at once).

    A quick probe so that a node with no network falls back at once instead of letting
    huggingface_hub retry for tens of seconds.
    """
    import socket
    from urllib.parse import urlsplit

    if offline_mode():
        return False
    parts = urlsplit((endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _validate(path: Path) -> GGUFInfo:
    return inspect_gguf(path)


def offline_mode() -> bool:
    """Downloads are off here: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set."""
    from huggingface_hub import constants

    flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return flag.strip().upper() in {"1", "ON", "YES", "TRUE"} or bool(constants.is_offline_mode())


def _discard(snapshot_file: Path) -> None:
    """Remove a cached file: the snapshot link and the blob it points to."""
    blob = snapshot_file.resolve()
    for p in {snapshot_file, blob}:
        try:
            p.unlink()
        except OSError:
            pass


def _reason(exc: BaseException) -> str:
    """The most telling cause in an exception chain, as a short phrase."""
    import httpx2
    from huggingface_hub import errors as hf

    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    for e in chain:
        if isinstance(e, hf.GatedRepoError):
            return "the repository is gated: accept its terms on the Hub and log in (`hf auth login`)"
        if isinstance(e, hf.RepositoryNotFoundError):
            return "repository not found (or private)"
        if isinstance(e, hf.RemoteEntryNotFoundError):
            return "file not found in the repository"
        if isinstance(e, hf.FileMetadataError):
            return "the server does not answer like a Hugging Face Hub (no ETag / X-Repo-Commit)"
        if isinstance(e, hf.RevisionNotFoundError):
            return f"revision '{REVISION}' not found"
        if isinstance(e, hf.OfflineModeIsEnabled):
            return "offline mode is on (HF_HUB_OFFLINE)"
        if isinstance(e, httpx2.ConnectError):
            return "cannot connect (offline, or the server is down or blocked)"
        if isinstance(e, httpx2.TimeoutException):
            return "the connection timed out"
        if isinstance(e, hf.HfHubHTTPError) and getattr(e, "response", None) is not None:
            return f"HTTP {e.response.status_code} {e.response.reason_phrase}".strip()
        if isinstance(e, httpx2.HTTPError):
            return f"network error: {first_line(e, 200)}"
    if any(isinstance(e, hf.LocalEntryNotFoundError) for e in chain):
        return "not in the cache and the Hub could not be reached"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{exc.strerror or exc}"  # disk full, permissions
    return first_line(exc, 200)


def _bar_class(progress: Progress) -> type | None:
    if progress is True:
        return None  # huggingface_hub's own bar (hidden when not on a terminal)
    callback = progress if callable(progress) else None

    class _Quiet(_tqdm):  # vanilla tqdm, never drawn; reports to the callback if any
        def __init__(self, *args, **kwargs):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self._done = int(kwargs.get("initial") or 0)
            self._total = kwargs.get("total")

        def update(self, n=1):
            self._done += int(n or 0)
            if callback is not None:
                callback(self._done, self._total)

    return _Quiet
