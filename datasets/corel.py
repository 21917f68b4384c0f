"""The Corel image features (MineBench / STAMP k-means inputs; seed paper 004 Figure 6)."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

from gpumine.datasets.minebench import read_minebench_bin
from gpumine.exceptions import (
    DataFormatError,
    DataIOError,
    DataNotFoundError,
    InvalidParameterError,
)

__all__ = ["COREL_SUBSETS", "COREL_URL", "load_corel"]

#: Where the files are published (Wei-keng Liao's parallel k-means package, MIT licence).
COREL_URL = "https://raw.githubusercontent.com/serban/kmeans/master/Image_data/{subset}17695.bin"

#: subset -> (n_features, sha256 of the .bin file)
COREL_SUBSETS = {
    "color": (9, "1d286c21859058d102b56340dccabfcd6f51733e334cc739152af59b52060abb"),
    "edge": (18, "69a23ea3663f7f1c55c2715eb59bf3c8ca345b5737710035b28a5de30a5d6b75"),
    "texture": (20, "98f95c523269dde79f0d6ee57517cfb9db7bf1f3b6ebd24b799f625c79e8e13e"),
}
_N_SAMPLES = 17695


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _search_dirs(data_home) -> list[Path]:
    dirs = []
    if data_home is not None:
        dirs.append(Path(data_home).expanduser())
    if os.environ.get("GPUMINE_DATA"):
        dirs.append(Path(os.environ["GPUMINE_DATA"]).expanduser())
    dirs.append(Path("~/.cache/gpumine").expanduser())
    return dirs


#: Seconds a connection or a read may stall before the download gives up.
STALL_SECONDS = 15.0
#: Seconds a whole download may take (the files are 0.6-1.4 MB).
DEADLINE_SECONDS = 120.0
_CHUNK = 1 << 16


def _download(url: str, target: Path, sha256: str, *, stall=None, deadline=None) -> None:
    """Fetch ``url`` into ``target`` via a temporary file; keep it only if the checksum matches.

    A stalled connection or read gives up after ``stall`` seconds, the whole transfer
    after ``deadline`` (a host that trickles bytes is stopped too).
    """
    stall = STALL_SECONDS if stall is None else stall
    deadline = DEADLINE_SECONDS if deadline is None else deadline
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        start = time.monotonic()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=stall) as response:
            read = getattr(response, "read1", response.read)  # what has arrived, not a full chunk
            while chunk := read(_CHUNK):
                out.write(chunk)
                if time.monotonic() - start > deadline:
                    raise DataIOError(f"not complete after {deadline:.0f} s")
        actual = _sha256(tmp)
        if actual != sha256:
            raise DataFormatError(f"{url}: sha256 {actual} does not match the expected {sha256}; "
                                  "the download was discarded")
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError) as exc:
        raise DataIOError(f"could not download {url}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)


def load_corel(subset="color", data_home=None, download=True, *, url=None):
    """Load a Corel image-features subset: 17,695 images, float32.

    ``color`` has 9 features, ``edge`` 18 and ``texture`` 20 (the subsets as
    MineBench publishes them; UCI "Corel Image Features", 1999). The file
    ``{subset}17695.bin`` (MineBench raw binary) is looked for in ``data_home``,
    then ``$GPUMINE_DATA``, then ``~/.cache/gpumine``; every file found or
    downloaded is checked against its published sha256.

    Parameters
    ----------
    subset : {"color", "edge", "texture"}, default="color"
    data_home : str or path-like, optional
        First folder to look in, and where a download is stored (else the first
        of ``$GPUMINE_DATA`` and ``~/.cache/gpumine``).
    download : bool, default=True
        Download the file when it is not found.
    url : str, optional
        Source to download from instead of :data:`COREL_URL`, with ``{subset}``
        standing for the subset name (a mirror, or a ``file://`` URL).

    Returns
    -------
    X : ndarray of shape (17695, n_features), float32

    Raises
    ------
    FileNotFoundError
        Not found and ``download=False``.
    DataFormatError
        A file whose checksum does not match (a bad download is not kept).

    Examples
    --------
    >>> from gpumine.datasets import load_corel
    >>> X = load_corel("edge", data_home="../shared/datasets/corel")  # doctest: +SKIP
    >>> X.shape  # doctest: +SKIP
    (17695, 18)
    """
    if subset not in COREL_SUBSETS:
        raise InvalidParameterError(
            f"subset must be one of {sorted(COREL_SUBSETS)}, got {subset!r}")
    n_features, sha256 = COREL_SUBSETS[subset]
    filename = f"{subset}17695.bin"
    dirs = _search_dirs(data_home)
    path = next((d / filename for d in dirs if (d / filename).is_file()), None)
    if path is None:
        where = (f"{filename} is not in {', '.join(map(str, dirs))} (data_home, $GPUMINE_DATA, "
                 "~/.cache/gpumine, in that order)")
        if not download:
            raise DataNotFoundError(f"{where} and download=False")
        path = dirs[0] / filename
        source = (url or COREL_URL).format(subset=subset)
        try:
            _download(source, path, sha256)
        except OSError as exc:
            raise DataIOError(f"{exc}; {where}: put the file in one of them, or point data_home or "
                          "$GPUMINE_DATA at a folder that has it") from exc
    elif _sha256(path) != sha256:
        raise DataFormatError(f"{path}: sha256 does not match the published Corel {subset} file "
                              f"({sha256}); delete it to download a fresh copy")
    X = read_minebench_bin(path)
    if X.shape != (_N_SAMPLES, n_features):
        raise DataFormatError(f"{path}: expected shape ({_N_SAMPLES}, {n_features}), "
                              f"got {X.shape}")
    return np.ascontiguousarray(X, dtype=np.float32)
