"""The main example trains to the accuracy the README promises."""

import importlib.util
import re
import runpy
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


def _readme_block(heading: str) -> str:
    """The first ```python block under ``heading`` in README.md, as a user copies it."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = text.split(heading, 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_single_process_example_runs_as_written(tmp_path, capsys):
    script = tmp_path / "readme_example.py"
    script.write_text(_readme_block("## A single-process example"))
    runpy.run_path(str(script), run_name="__main__")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    found = re.fullmatch(r"loss (\d+\.\d{3}), test accuracy (\d\.\d{3})", line)
    assert found, line
    assert float(found.group(2)) >= 0.9, line
