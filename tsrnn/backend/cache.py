"""The disk cache of "auto"'s verdicts and measured choices, kept across processes.

One JSON file per *identity*: tsrnn's version, the build (the torch the extensions were built
against, ``tsrnn._built_with.TORCH_VERSION``, and the size and modification time of each compiled
extension file), torch's version and the device's name (the CPU's model name, or
``torch.cuda.get_device_name``). The file's name holds a short hash of the identity and the file
holds the identity as its header, checked on read; it holds two tables of text keys, "verdicts"
(a verification's result: null where the path agrees, else why "auto" drops it) and "choices"
(a measured choice: a path name).

The folder is ``$TSRNN_CACHE_DIR``, else ``$XDG_CACHE_HOME/tsrnn``, else ``~/.cache/tsrnn``;
``TSRNN_CACHE_DIR`` set to the empty string turns the cache off. A file is read once per process,
on the first lookup of its device; each new entry is written at once: under an advisory lock
(``fcntl.flock`` on ``<file>.lock``, where fcntl exists) the file is read again, merged (an entry
already on disk, written by another process, is kept) and replaced atomically (a temporary file in
the same folder, then ``os.replace``), so processes writing at once (DDP ranks) lose no entry and
never leave a torn file. A damaged file (not JSON, or not this structure) or a foreign one (another
identity's header) is ignored with one warning and rewritten. A folder that cannot be written is
warned about once; the process then keeps its entries in memory only.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import tempfile
import warnings
from pathlib import Path

import torch

from tsrnn import _version

try:
    import fcntl
except ImportError:  # not on Windows: writers then only replace the file atomically
    fcntl = None

TABLES = ("verdicts", "choices")
MISSING = object()  # what ``lookup`` returns for a key the cache does not hold
_stores: dict[str, "Store | None"] = {}  # device name -> its file's store (None: the cache is off)
_warned: set[str] = set()


def directory() -> Path | None:
    """The cache folder (see the module docstring), or None where TSRNN_CACHE_DIR="" turns it off."""
    given = os.environ.get("TSRNN_CACHE_DIR")
    if given is not None:
        return Path(given).expanduser() if given else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tsrnn"


def device_name(device: torch.device) -> str | None:
    """The name of the device the cache is kept for: the CPU's model name, the CUDA device's name;
    None for other devices (nothing is cached for them)."""
    if device.type == "cuda":
        return "cuda:" + torch.cuda.get_device_name(device)
    if device.type != "cpu":
        return None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "cpu:" + line.split(":", 1)[1].strip()
    return "cpu:" + (platform.processor() or platform.machine())


def identity(name: str) -> dict:
    """The header of the file of device ``name``: what a verdict or a timing depends on besides the call."""
    try:
        from tsrnn._built_with import TORCH_VERSION as built_with
    except ImportError:  # a source tree that setup.py has not built
        built_with = None
    folder = Path(__file__).resolve().parents[1]  # the package's folder, where the extensions lie
    extensions = [[file.name, file.stat().st_size, file.stat().st_mtime_ns] for file in sorted(folder.iterdir())
                  if file.name.startswith(("_C.", "_cuda.")) and file.suffix in (".so", ".pyd")]
    return {"tsrnn": _version.VERSION, "built_with": built_with, "extensions": extensions,
            "torch": torch.__version__, "device": name}


def lookup(device: torch.device, table: str, key: str):
    """The entry ``key`` of ``table`` ("verdicts", "choices") for ``device``, or ``MISSING`` where
    the cache holds none (a verdict may be None: the path agrees)."""
    store = _store(device)
    return MISSING if store is None else store.entries[table].get(key, MISSING)


def record(device: torch.device, table: str, key: str, value) -> None:
    """Writes the entry ``key`` of ``table`` for ``device`` to its file (see the module docstring)."""
    store = _store(device)
    if store is not None:
        store.write(table, key, value)


def _store(device: torch.device) -> "Store | None":
    name = device_name(device)
    if name is None:
        return None
    if name not in _stores:
        folder = directory()
        _stores[name] = None if folder is None else Store(folder, identity(name))
    return _stores[name]


def forget() -> None:
    """Drops the files read so far: the next lookup reads them again (TSRNN_CACHE_DIR anew)."""
    _stores.clear()
    _warned.clear()


class Store:
    """One identity's file: its path, its header and the entries read or written so far."""

    def __init__(self, folder: Path, header: dict):
        self.header = header
        digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()[:16]
        self.path = folder / f"choices-{digest}.json"
        self.entries = {table: {} for table in TABLES}
        self.writable = True
        found, damaged = self._read()
        self.entries = found
        if damaged:
            self._replace(lambda: None)  # rewritten at once, under the lock

    def _read(self) -> tuple[dict, bool]:
        """The file's entries (empty where it is missing or unusable), and whether it was damaged
        or foreign (warned about once)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {table: {} for table in TABLES}, False
        except OSError as exc:
            self._warn(f"tsrnn: the backend cache {self.path} cannot be read ({exc}); ignoring it")
            return {table: {} for table in TABLES}, False
        why = None
        try:
            data = json.loads(text)
        except ValueError as exc:
            why = f"it is not JSON ({exc})"
        else:
            why = _invalid(data, self.header)
        if why is not None:
            self._warn(f"tsrnn: the backend cache {self.path} is ignored and rewritten: {why}")
            return {table: {} for table in TABLES}, True
        return {table: dict(data[table]) for table in TABLES}, False

    def write(self, table: str, key: str, value) -> None:
        """Adds the entry to memory and to the file (the file's entries kept where both hold a key)."""
        self.entries[table].setdefault(key, value)
        if self.writable:
            self._replace(lambda: self.entries[table].setdefault(key, value))

    def _replace(self, add) -> None:
        """Under the lock: reads the file again, merges it into memory, ``add()``s, and replaces it."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self.path.with_name(self.path.name + ".lock")):
                on_disk, _ = self._read()
                for table in TABLES:
                    self.entries[table] = {**self.entries[table], **on_disk[table]}
                add()
                descriptor, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                                         suffix=".tmp")
                try:
                    with os.fdopen(descriptor, "w") as file:
                        json.dump({"header": self.header, **self.entries}, file, indent=1, sort_keys=True)
                    os.replace(temporary, self.path)
                except BaseException:
                    os.unlink(temporary)
                    raise
        except OSError as exc:
            self.writable = False
            self._warn(f"tsrnn: the backend cache {self.path} cannot be written ({exc}); this process keeps "
                       "its verdicts and choices in memory only")

    def _warn(self, message: str) -> None:
        if str(self.path) not in _warned:
            _warned.add(str(self.path))
            warnings.warn(message, RuntimeWarning, stacklevel=2)


def _invalid(data, header: dict) -> str | None:
    """Why ``data`` (a parsed file) is not a cache file of ``header``, or None."""
    if not isinstance(data, dict) or set(data) != {"header", *TABLES}:
        return "it does not hold a header, 'verdicts' and 'choices'"
    if data["header"] != header:
        return "it was written for another identity (tsrnn, build, torch or device)"
    verdicts, choices = data["verdicts"], data["choices"]
    if not isinstance(verdicts, dict) or not all(v is None or isinstance(v, str) for v in verdicts.values()):
        return "its verdicts are not text or null"
    if not isinstance(choices, dict) or not all(isinstance(v, str) for v in choices.values()):
        return "its choices are not path names"
    return None


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive advisory lock on ``path`` (created if missing) while the block runs; no lock
    where fcntl is missing."""
    with open(path, "a") as file:
        if fcntl is not None:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(file.fileno(), fcntl.LOCK_UN)
