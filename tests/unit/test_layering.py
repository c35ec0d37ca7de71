"""The dependency rule of DESIGN.md, checked on the source: each layer imports only the
layers beneath it, and only backend.py imports cupy."""

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "mpiflow"

# layer (module path prefix) -> mpiflow modules it may import (prefixes)
ALLOWED = {
    "mpiflow.framework": ("mpiflow.framework", "mpiflow.dtype_table", "mpiflow.errors"),
    "mpiflow.ops": ("mpiflow.framework", "mpiflow.ops", "mpiflow.errors",
                    "mpiflow.half_floats"),
    "mpiflow.gradients": ("mpiflow.framework", "mpiflow.ops", "mpiflow.errors"),
    "mpiflow.comm": ("mpiflow.comm", "mpiflow.dtype_table", "mpiflow.backend", "mpiflow.errors",
                     "mpiflow.config", "mpiflow.half_floats"),
    "mpiflow.runtime": ("mpiflow.framework", "mpiflow.ops", "mpiflow.gradients",
                        "mpiflow.comm", "mpiflow.runtime", "mpiflow.backend",
                        "mpiflow.errors", "mpiflow.config", "mpiflow.logger"),
    "mpiflow.backend": ("mpiflow.errors", "mpiflow.config"),
    "mpiflow.errors": (),
    "mpiflow.dtype_table": (),
    "mpiflow.half_floats": (),
    # The loaders need no graph; tf.data's Dataset is only re-exported from mpiflow.dataset.
    "mpiflow.data": ("mpiflow.errors", "mpiflow.unsupported", "mpiflow.dataset"),
    "mpiflow.unsupported": ("mpiflow.errors",),
    # tf.layers, tf.losses, tf.metrics: compositions of ops, with no runtime of their own.
    "mpiflow.layers": ("mpiflow.framework", "mpiflow.ops", "mpiflow.errors", "mpiflow.layers",
                       "mpiflow.unsupported"),
    "mpiflow.losses": ("mpiflow.framework", "mpiflow.ops", "mpiflow.errors", "mpiflow.losses",
                       "mpiflow.unsupported"),
    "mpiflow.metrics": ("mpiflow.framework", "mpiflow.ops", "mpiflow.errors",
                        "mpiflow.metrics", "mpiflow.unsupported"),
}


def _modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
        yield name, path


def _imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "mpiflow":
                for alias in node.names:
                    yield f"mpiflow.{alias.name}"
            else:
                yield node.module


@pytest.mark.parametrize("name,path", list(_modules()), ids=lambda v: str(v))
def test_module_imports_only_lower_layers(name, path):
    layer = next((k for k in ALLOWED if name == k or name.startswith(k + ".")), None)
    if layer is None:
        return  # train/, nn, the package root: may use everything
    bad = [imp for imp in _imports(path)
           if imp.startswith("mpiflow") and not imp.startswith(ALLOWED[layer])]
    assert not bad, f"{name} (layer {layer}) imports {bad}"


def test_only_backend_imports_cupy():
    offenders = [name for name, path in _modules() if name != "mpiflow.backend" and
                 any(i == "cupy" or i.startswith("cupy.") for i in _imports(path))]
    assert not offenders, f"cupy imported outside mpiflow/backend.py: {offenders}"


# Above train: the public API and the command that launches scripts written against it.
TOP = ("mpiflow", "mpiflow.run")


def test_nothing_imports_train_except_the_public_api():
    offenders = [name for name, path in _modules()
                 if not name.startswith("mpiflow.train") and name not in TOP
                 and any(i.startswith("mpiflow.train") for i in _imports(path))]
    assert not offenders, f"mpiflow.train imported by {offenders}"


def test_kernels_reach_the_runtime_only_through_the_kernel_environment():
    """Op kernels ask ``ctx.env`` (``runtime.kernel_env.KernelEnv``) for what they need, and
    only for what it declares: nothing of the runtime's internals (its store, its service)."""
    import re

    from mpiflow.runtime.kernel_env import KernelEnv
    declared = {n for n in dir(KernelEnv) if not n.startswith("_")} - {"store"}
    used = set()
    for path in sorted((PACKAGE / "ops").glob("*.py")):
        text = path.read_text()
        assert "ctx.state" not in text, f"{path.name} reaches the runtime past ctx.env"
        used |= {(path.name, m) for m in re.findall(r"ctx\.env\.(\w+)", text)}
    undeclared = sorted((f, m) for f, m in used if m not in declared)
    assert not undeclared, f"kernels use runtime members KernelEnv does not declare: {undeclared}"
    assert used, "no kernel uses ctx.env: is the pattern out of date?"


def test_importing_mpiflow_does_not_start_mpi():
    """``import mpiflow`` stays free of MPI (mpi4py.MPI initialises it on import): the
    supervising parent of ``mpiflow.run`` imports mpiflow and is no rank of the job, and
    a single-process script never needs MPI at all."""
    import subprocess
    import sys
    code = ("import sys, mpiflow, mpiflow.train; "
            "import mpiflow.runtime.session, mpiflow.runtime.plan_compiler; "
            "print('mpi4py.MPI' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_no_module_of_the_package_shadows_a_standard_library_module():
    # A script run from inside the package (python mpiflow/info.py, as the launch tests
    # and users do) has that directory first on sys.path: a mpiflow/math.py there was
    # imported as the standard library's math, and numpy failed to import on every rank.
    shadowing = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                       if p.stem in sys.stdlib_module_names)
    assert shadowing == []
