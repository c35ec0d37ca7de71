"""The main example trains to the accuracy the README promises."""

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist_mlp.py"


def _load_example():
    if str(EXAMPLE.parent) not in sys.path:   # the example imports its sibling mlp_model
        sys.path.insert(0, str(EXAMPLE.parent))
    spec = importlib.util.spec_from_file_location("mnist_mlp_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_mlp_on_digits_reaches_95_percent(optimizer, capsys):
    accuracy = _load_example().main(["--optimizer", optimizer])
    out = capsys.readouterr().out
    assert "test accuracy" in out
    assert accuracy >= 0.95, out


def test_mlp_reads_mnist_files_from_data_dir(tmp_path, capsys):
    import numpy as np
    rng = np.random.default_rng(0)
    # A tiny MNIST-shaped npz: the loader path, not the accuracy, is under test here.
    np.savez(tmp_path / "mnist.npz",
             x_train=rng.integers(0, 255, (256, 28, 28), dtype=np.uint8),
             y_train=rng.integers(0, 10, 256).astype(np.uint8),
             x_test=rng.integers(0, 255, (64, 28, 28), dtype=np.uint8),
             y_test=rng.integers(0, 10, 64).astype(np.uint8))
    _load_example().main(["--data-dir", str(tmp_path), "--epochs", "1"])
    assert "784 features" in capsys.readouterr().out
