"""Finite-difference gradient checks shared by every op test file.

A ``GradCase`` builds part of a graph from float64 placeholders; the check compares
``mf.gradients`` of a random projection of its output with central differences of the
same projection. Each ops test module lists its cases in ``GRAD_CASES``;
``test_gradient_coverage.py`` fails when a differentiable op has no case.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np

import mpiflow as mf
from mpiflow.gradients import densify


@dataclasses.dataclass
class GradCase:
    """One gradient check: ``build(*placeholders) -> Tensor`` at the given input values.

    ``wrt`` lists which inputs to differentiate (default: every float input).
    """

    name: str
    build: Callable
    inputs: Sequence[np.ndarray]
    wrt: Sequence[int] | None = None
    rtol: float = 1e-5
    atol: float = 1e-6
    delta: float = 1e-6

    def __repr__(self):
        return self.name


def build_case(case: GradCase):
    """Build ``case`` in a fresh graph; return (graph, placeholders, output, op types)."""
    graph = mf.Graph()
    with graph.as_default():
        phs = [mf.placeholder(mf.as_dtype(np.asarray(v).dtype), np.shape(v), name=f"in{i}")
               for i, v in enumerate(case.inputs)]
        before = len(graph.get_operations())
        out = case.build(*phs)
        types = {op.type for op in graph.get_operations()[before:]}
    return graph, phs, out, types


def check_gradient(case: GradCase) -> None:
    """Assert symbolic gradients of ``case`` match central finite differences."""
    graph, phs, out, _ = build_case(case)
    wrt = case.wrt if case.wrt is not None else [
        i for i, v in enumerate(case.inputs) if np.asarray(v).dtype.kind == "f"]
    values = [np.array(v, copy=True) for v in case.inputs]
    with graph.as_default():
        out_shape = _run(graph, out, phs, values).shape
        weights = np.random.default_rng(1).standard_normal(out_shape)
        loss = mf.reduce_sum(mf.multiply(out, mf.constant(weights, dtype=out.dtype)))
        grads = mf.gradients(loss, [phs[i] for i in wrt])
        sess = mf.Session(graph=graph)
        feed = dict(zip(phs, values))
        symbolic = sess.run([densify(g) if g is not None else loss
                             for g in grads], feed)
        for k, i in enumerate(wrt):
            label = f"{case.name}: backward pass for input {i}"
            assert grads[k] is not None, f"{label}: mf.gradients returned None"
            numeric = np.zeros_like(values[i])
            flat = values[i].reshape(-1)
            nflat = numeric.reshape(-1)
            for j in range(flat.size):
                saved = flat[j]
                flat[j] = saved + case.delta
                up = sess.run(loss, feed)
                flat[j] = saved - case.delta
                down = sess.run(loss, feed)
                flat[j] = saved
                nflat[j] = (up - down) / (2 * case.delta)
            got = np.asarray(symbolic[k])
            assert got.shape == numeric.shape, f"{label}: shape {got.shape} != {numeric.shape}"
            np.testing.assert_allclose(got, numeric, rtol=case.rtol, atol=case.atol,
                                       err_msg=label)
        sess.close()


def _run(graph, out, phs, values):
    with mf.Session(graph=graph) as sess:
        return np.asarray(sess.run(out, dict(zip(phs, values))))


def check_forward(build, inputs, expected, rtol=1e-6, atol=1e-7):
    """Assert ``build(*placeholders)`` evaluates to ``expected`` and matches its static
    shape and dtype (the shape function and the kernel must agree)."""
    graph = mf.Graph()
    with graph.as_default():
        phs = [mf.placeholder(mf.as_dtype(np.asarray(v).dtype), np.shape(v)) for v in inputs]
        out = build(*phs)
        with mf.Session() as sess:
            got = sess.run(out, dict(zip(phs, inputs)))
    got = np.asarray(got)
    expected = np.asarray(expected)
    assert out.shape.is_compatible_with(got.shape), \
        f"static shape {out.shape} disagrees with the kernel's {got.shape}"
    assert got.dtype == out.dtype.np_dtype, \
        f"static dtype {out.dtype.name} disagrees with the kernel's {got.dtype}"
    assert got.shape == expected.shape, f"shape {got.shape}, expected {expected.shape}"
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def second_order(build_first):
    """A build whose output is a gradient of ``build_first``'s, so that the gradient's own
    ops are differentiated too."""
    def build(*xs):
        y = build_first(*xs)
        g = mf.gradients(mf.reduce_sum(y * y * y), xs[0])[0]
        return densify(g) * xs[0]
    return build
