"""docs/tf1_api.md tells the truth: every tf. name its Supported section lists exists in
mpiflow, and every name in the first column of its Not supported table does not, so the
page cannot drift from the API."""

import re
from pathlib import Path

import pytest

import mpiflow as mf

DOC = Path(__file__).resolve().parents[2] / "docs" / "tf1_api.md"
NAME = re.compile(r"`(tf(?:\.\w+)+)`")


def _section(title: str) -> str:
    text = DOC.read_text()
    found = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert found, f"docs/tf1_api.md has no '## {title}' section"
    return found.group(1)


def _resolve(name: str):
    """The mpiflow object ``tf.a.b`` names (``tf`` is mpiflow)."""
    obj = mf
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def supported_names() -> list:
    return sorted(set(NAME.findall(_section("Supported"))))


def unsupported_names() -> list:
    rows = [line for line in _section("Not supported").splitlines()
            if line.startswith("|") and not line.startswith(("| TF1", "| ---"))]
    return sorted({name for row in rows for name in NAME.findall(row.split("|")[1])})


def test_the_page_lists_the_api_by_namespace():
    names = supported_names()
    assert len(names) > 300
    for namespace in ("nn", "train", "data", "layers", "losses", "metrics", "summary",
                      "app", "flags", "logging", "errors", "compat"):
        assert any(n.startswith(f"tf.{namespace}.") for n in names), namespace
    assert len(unsupported_names()) > 20


@pytest.mark.parametrize("name", supported_names())
def test_every_supported_name_exists(name):
    try:
        _resolve(name)
    except AttributeError as exc:
        pytest.fail(f"docs/tf1_api.md lists {name} as supported, but: {exc}")


@pytest.mark.parametrize("name", unsupported_names())
def test_every_unsupported_name_is_missing(name):
    with pytest.raises(AttributeError):
        _resolve(name)


def test_the_user_guide_links_the_page():
    readme = (DOC.parent / "README.md").read_text()
    assert "(tf1_api.md)" in readme
