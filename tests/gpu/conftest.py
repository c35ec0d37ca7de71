"""GPU tests: skipped, with the reason, where cupy or a GPU is missing.

``benchmarks/gpu_check.sh`` runs them with the GPU benchmarks on a machine with a GPU.
"""

import pytest

from mpiflow import backend


def pytest_collection_modifyitems(config, items):
    if backend.gpu_available():
        return
    skip = pytest.mark.skip(reason=f"needs cupy and a GPU ({backend.gpu_reason()})")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
