"""Engine tests: skipped without the ``torch`` extra; torch runs single-threaded for them.

The models here are tiny, so a second intra-op thread only adds synchronisation, and on a loaded
machine its spin-waits made every small operation several milliseconds slower.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

if importlib.util.find_spec("torch") is None:
    collect_ignore_glob = ["test_engine_*.py", "engine_cases.py"]


@pytest.fixture(autouse=True, scope="module")
def _single_torch_thread() -> Iterator[None]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
