"""``mf.print`` (TF1's ``tf.print``) and ``mf.Print`` (``tf.Print``) in one process: the
line a step prints, where it goes, how tensors are summarized, and its rank tag."""

import io
import os
import subprocess
import sys

import numpy as np
import pytest

import mpiflow as mf
from mpiflow import errors, logger
from tests.conftest import REPO_ROOT


@pytest.fixture(autouse=True)
def _untagged(monkeypatch):
    """A process outside a launch: no tag (whatever role an earlier test gave this one)."""
    monkeypatch.setattr(logger, "_TAG", [""])


def _run(*fetches):
    with mf.Session() as sess:
        return [sess.run(f) for f in fetches]


def test_print_writes_its_texts_and_tensors_as_one_line_on_stderr(capfd):
    _run(mf.print("x", mf.constant([1, 2, 3]), "and", mf.constant(2.5)))
    assert capfd.readouterr() == ("", "x [1 2 3] and 2.5\n")


def test_print_runs_each_time_the_step_runs_it(capfd):
    op = mf.print("tick", mf.constant(1))
    with mf.Session() as sess:
        for _ in range(3):
            sess.run(op)
    assert capfd.readouterr().err == "tick 1\n" * 3


@pytest.mark.parametrize("stream", [lambda: sys.stdout, lambda: "stdout"],
                         ids=["sys.stdout", "name"])
def test_output_stream_stdout_prints_to_stdout(capfd, stream):
    _run(mf.print("to stdout", mf.constant(1), output_stream=stream()))
    assert capfd.readouterr() == ("to stdout 1\n", "")


def test_what_python_printed_before_comes_out_first():
    # stdout on a pipe: Python buffers what the script printed; the step's line, written
    # to the file descriptor, must come after it all the same.
    code = ("import sys\nimport mpiflow as mf\n"
            "op = mf.print('then the step', output_stream=sys.stdout)\n"
            "print('first python,', end=' ')\n"
            "mf.Session().run(op)\n"
            "print('then python again')\n")
    env = {k: v for k, v in os.environ.items()
           if k not in logger._RANK_VARIABLES and k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                          text=True, env=env, cwd=REPO_ROOT, timeout=120)
    assert proc.stdout == "first python, then the step\nthen python again\n", proc.stderr


def test_summarize_keeps_that_many_items_at_each_end(capfd):
    values = mf.range(10)
    _run(mf.print(values), mf.print(values, summarize=2), mf.print(values, summarize=None),
         mf.print(values, summarize=-1), mf.print("a", "b", sep=", "))
    assert capfd.readouterr().err.splitlines() == [
        "[0 1 2 ... 7 8 9]",            # TensorFlow's default: 3
        "[0 1 ... 8 9]",
        "[0 1 2 3 4 5 6 7 8 9]",        # None or negative: everything
        "[0 1 2 3 4 5 6 7 8 9]",
        "a, b",
    ]


def test_a_multi_line_value_has_every_line_tagged(capfd, monkeypatch):
    monkeypatch.setattr(logger, "_TAG", ["[worker:3 r7] "])
    _run(mf.print("m =", mf.constant([[1, 2], [3, 4]])))
    assert capfd.readouterr().err == "[worker:3 r7] m = [[1 2]\n[worker:3 r7]  [3 4]]\n"


def test_Print_passes_its_input_through_and_prints_the_first_n_times(capfd):
    t = mf.constant([1.5, 2.0])
    shown = mf.Print(t, [t, mf.constant(7)], message="m", first_n=2)
    with mf.Session() as sess:
        values = [sess.run(shown) for _ in range(3)]
    assert all(np.array_equal(v, [1.5, 2.0]) for v in values)
    assert capfd.readouterr().err == "m[1.5 2. ]7\n" * 2


def test_Print_without_first_n_prints_every_time(capfd):
    t = mf.constant(3)
    shown = mf.Print(t * 2, [t], message="t=")
    with mf.Session() as sess:
        assert [sess.run(shown) for _ in range(3)] == [6, 6, 6]
    assert capfd.readouterr().err == "t=3\n" * 3


@pytest.mark.parametrize("stream", [io.StringIO(), "stdlog", None], ids=repr)
def test_a_stream_other_than_stdout_or_stderr_is_refused(stream):
    with pytest.raises(errors.InvalidArgumentError) as info:
        mf.print("x", output_stream=stream)
    assert "mf.print cannot write to" in str(info.value)
    assert "sys.stderr, sys.stdout, 'stderr' or 'stdout'" in str(info.value)
