"""Every registered op either declares it has no gradient or has a finite-difference case."""

import importlib
import pkgutil

import mpiflow  # noqa: F401  (registers every op)
from mpiflow.ops.registry import NOT_DEFINED, get_op_def, registered_op_types
from tests import ops as ops_tests
from tests.ops.gradcheck import build_case


def _all_cases():
    cases = []
    for info in pkgutil.iter_modules(ops_tests.__path__):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"tests.ops.{info.name}")
            cases.extend(getattr(module, "GRAD_CASES", []))
    return cases


def test_every_op_declares_its_gradient():
    undeclared = [t for t in registered_op_types() if get_op_def(t).gradient is NOT_DEFINED]
    assert not undeclared, (
        f"ops with no gradient written and no 'gradient = None' declaration: {undeclared}")


def test_every_differentiable_op_has_a_gradient_case():
    covered = set()
    for case in _all_cases():
        covered |= build_case(case)[3]
    differentiable = {t for t in registered_op_types() if get_op_def(t).gradient is not None
                      and get_op_def(t).gradient is not NOT_DEFINED}
    missing = sorted(differentiable - covered)
    assert not missing, f"differentiable ops without a finite-difference case: {missing}"


def test_the_readme_counts_the_ops_as_the_registry_does():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    found = re.search(r"(\d+) op types, (\d+) of them differentiable.*?the other (\d+) ",
                      readme, re.DOTALL)
    assert found, "README no longer states the op count"
    types = registered_op_types()
    differentiable = [t for t in types if get_op_def(t).gradient is not None]
    assert (int(found[1]), int(found[2]), int(found[3])) == (
        len(types), len(differentiable), len(types) - len(differentiable))
