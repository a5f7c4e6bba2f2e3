"""One virtual environment per engine, built once and cached, and the engine's own tests.

Owns: building `<cache>/<engine>-<version>` (CPU torch, the engine from PyPI, pinned), putting
this checkout's poold into it on every session (so a cached venv never tests an old poold), and
fetching the engine's sdist (its tests ship only there) by its pinned sha256, unpacked beside
the venv. Leaves alone: which tests run and what they assert (tests/engines/test_*.py).

The cache is `POOLD_ENGINES_CACHE` (default ~/.cache/poold-engines). A venv is built only when
asked (`POOLD_TEST_REQUIRE_ENGINES=1`, as CI does) or when it is there already; otherwise the
tier skips, saying how much it would install.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.preconditions import required, unmet

REPO = Path(__file__).resolve().parents[2]
INSTALL_S = 1800  # a cold venv is about 2 GB of wheels


@dataclass(frozen=True)
class Engine:
    name: str
    version: str
    # pip install steps, in order (CPU torch first, so the engine keeps it); "{sdist}" stands
    # for the unpacked sdist, for an engine whose requirements ship only there
    installs: tuple[tuple[str, ...], ...]
    sdist_sha256: str | None  # None: the engine ships no sdist (its wheels carry no tests)
    keep: tuple[str, ...]  # what of the sdist is unpacked: its tests, and what installs name
    size: str  # what a cold install costs, said when the tier skips
    env: tuple[tuple[str, str], ...] = ()  # what the engine's processes need set

    @property
    def slug(self) -> str:
        return f"{self.name}-{self.version}"


LMCACHE = Engine("lmcache", "0.5.6", (("torch==2.13.0", "lmcache==0.5.6"),),
                 "d6951e60ce8818a76aa42d0866a4ba85f1c95cd919355fff30ff24dcc3243f1e",
                 ("tests/", "pytest.ini"), "1.9 GB")
# vLLM pins a torch of its own: installed without its dependencies, then its common ones (the
# CUDA-only ones left out), as vLLM documents for CPU-only use.
VLLM = Engine("vllm", "0.33.0",
              (("torch==2.13.0", "pytest"), ("--no-deps", "vllm==0.33.0"),
               ("-r", "{sdist}/requirements/common.txt")),
              "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112",
              ("tests/v1/kv_offload/", "requirements/"), "3.5 GB",
              (("VLLM_TARGET_DEVICE", "cpu"),))
# SGLang pins a CUDA torch and kernels: installed without its dependencies, then what its
# HiCache storage modules import (found by importing them on a CPU-only machine).
SGLANG = Engine("sglang", "0.5.23",
                (("torch==2.13.0", "pytest", "numpy"), ("--no-deps", "sglang==0.5.23"),
                 ("orjson", "psutil", "pybase64", "requests", "triton", "pillow", "starlette",
                  "msgspec", "pyzmq", "tqdm", "IPython", "pydantic", "aiohttp")),
                None, (), "2.3 GB")


def cache_dir() -> Path:
    return Path(os.environ.get("POOLD_ENGINES_CACHE", "~/.cache/poold-engines")).expanduser()


def _run(*cmd: str | Path, timeout: float = INSTALL_S) -> None:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} exited {done.returncode}:\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


@functools.cache
def python(engine: Engine) -> Path:
    """The engine venv's python, with this checkout's poold installed in it (once a session)."""
    venv = cache_dir() / engine.slug
    marker = venv / ".poold-requirements"
    wanted = json.dumps(engine.installs)
    if not marker.exists() or marker.read_text() != wanted:
        if not required("engines"):
            unmet("engines", f"no {engine.slug} venv in {cache_dir()}: building it installs "
                             f"{engine.size} from PyPI")
        sdist = sdist_tests(engine) if engine.sdist_sha256 is not None else None
        shutil.rmtree(venv, ignore_errors=True)
        _run(sys.executable, "-m", "venv", venv)
        for step in engine.installs:
            _run(venv / "bin" / "pip", "install", "--quiet",
                 *(a.replace("{sdist}", str(sdist)) for a in step))  # None only where unused
        marker.write_text(wanted)
    # Not editable: the cache outlives this checkout, and another clone may use it next. pip
    # reinstalls a local directory every time; the engine brought setuptools to build it.
    _run(venv / "bin" / "pip", "install", "--quiet", "--no-build-isolation", REPO)
    return venv / "bin" / "python"


def _index() -> str:
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


@functools.cache
def sdist_tests(engine: Engine) -> Path:
    """A folder holding what the engine keeps of its sdist (its `tests/`, its pytest.ini, its
    requirements), fetched once, checked against the pinned sha256. Tests run from there, so
    the sdist's own package never shadows the installed one."""
    assert engine.sdist_sha256 is not None, f"{engine.slug} ships no sdist"
    root = cache_dir() / f"{engine.slug}-sdist"
    if (root / ".complete").exists():
        return root
    name = f"{engine.name}-{engine.version}.tar.gz"
    request = urllib.request.Request(f"{_index()}/{engine.name}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        files = json.load(answer)["files"]
    url = next(f["url"] for f in files if f["filename"] == name)
    with urllib.request.urlopen(url, timeout=300) as answer:
        data = answer.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != engine.sdist_sha256:
        raise RuntimeError(f"{name}: sha256 {digest}, pinned {engine.sdist_sha256}")
    staging = root.with_suffix(".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    archive = staging / name
    archive.write_bytes(data)
    top = f"{engine.name}-{engine.version}"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers()
                   if m.name.startswith(tuple(f"{top}/{k}" for k in engine.keep))]
        tar.extractall(staging, members=members, filter="data")
    for kept in (staging / top).iterdir():
        kept.rename(staging / kept.name)
    shutil.rmtree(staging / top)
    archive.unlink()
    (staging / ".complete").touch()
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    return root
