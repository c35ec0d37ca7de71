"""A TF1 name mpiflow lacks fails where the script uses it, with an error that names the
tf. name and points to docs/tf1_api.md, in every namespace; it is still an
AttributeError, so hasattr, getattr with a default and submodule imports behave."""

import subprocess
import sys

import pytest

import mpiflow as mf
from tests.conftest import REPO_ROOT

NAMESPACES = [("tf", mf), ("tf.train", mf.train), ("tf.nn", mf.nn), ("tf.data", mf.data),
              ("tf.summary", mf.summary), ("tf.app", mf.app), ("tf.logging", mf.logging),
              ("tf.compat", mf.compat), ("tf.layers", mf.layers), ("tf.losses", mf.losses),
              ("tf.metrics", mf.metrics), ("tf.math", mf.math)]


@pytest.mark.parametrize("tf_name,module", NAMESPACES, ids=[n for n, _ in NAMESPACES])
def test_every_namespace_names_the_missing_tf_name_and_the_docs_page(tf_name, module):
    with pytest.raises(mf.errors.UnsupportedAPIError) as info:
        module.SomethingMissing
    message = str(info.value)
    assert message.startswith(f"mpiflow does not support {tf_name}.SomethingMissing")
    assert "docs/tf1_api.md" in message
    assert isinstance(info.value, AttributeError)
    assert isinstance(info.value, mf.errors.MpiflowError)


@pytest.mark.parametrize("use,words", [
    (lambda: mf.contrib, "tf.contrib"),
    (lambda: mf.estimator, "MonitoredTrainingSession"),
    (lambda: mf.keras, "tf.layers"),
    (lambda: mf.while_loop, "no control flow"),
    (lambda: mf.cond, "tf.where"),
    (lambda: mf.nn.rnn_cell, "while_loop"),
    (lambda: mf.nn.dynamic_rnn, "while_loop"),
    (lambda: mf.train.shuffle_batch, "tf.data.Dataset"),
    (lambda: mf.data.TFRecordDataset, "no string dtype"),
    (lambda: mf.math.segment_sum, r"tf\.math\.unsorted_segment_sum\(data, segment_ids, "
                                  r"num_segments\), num_segments being the largest id \+ 1"),
    # not "did you mean tf.summary.merge?": difflib's nearest name
    (lambda: mf.summary.audio, r"tensorboardX\.summary\.audio\('tag', value"),
    (lambda: mf.summary.text, r"writer\.add_summary\(tensorboardX\.summary\.text"),
    # not "did you mean tf.train.AdagradOptimizer?": the optimizers that exist
    (lambda: mf.train.AdagradDAOptimizer,
     r"optimizers are tf\.train\.GradientDescent.*FtrlOptimizer.*subclass of "
     r"tf\.train\.Optimizer"),
    # not "did you mean tf.nn.conv1d?": the convolutions that exist
    (lambda: mf.nn.conv3d, r"convolutions are tf\.nn\.conv1d, conv2d and conv2d_transpose"),
    (lambda: mf.layers.separable_conv2d, r"tf\.layers\.conv1d, conv2d, conv2d_transpose"),
    (lambda: mf.nn.atrous_conv2d, r"tf\.nn\.conv2d\(value, filters, 1, padding, "
                                  r"dilations=rate\)"),
])
def test_common_tf1_names_say_what_to_do_instead(use, words):
    with pytest.raises(mf.errors.UnsupportedAPIError, match=words):
        use()


def test_a_near_miss_points_to_the_name_that_exists():
    with pytest.raises(AttributeError, match=r"did you mean tf\.train\.AdamOptimizer\?"):
        mf.train.AdamOptimiser


def test_hasattr_and_getattr_with_a_default_still_work():
    assert not hasattr(mf, "contrib") and not hasattr(mf.train, "SomethingMissing")
    assert getattr(mf.nn, "rnn_cell", "fallback") == "fallback"
    assert hasattr(mf.train, "AdamOptimizer") and hasattr(mf, "data")


@pytest.mark.parametrize("name", ["__wrapped__", "__path__", "_private_thing"])
def test_private_and_dunder_names_get_the_plain_attribute_error(name):
    with pytest.raises(AttributeError) as info:
        getattr(mf.nn, name)
    assert not isinstance(info.value, mf.errors.UnsupportedAPIError)
    assert str(info.value) == f"module 'mpiflow.nn' has no attribute '{name}'"


def test_submodules_not_imported_yet_still_import_through_the_package():
    code = ("import sys, mpiflow\nassert 'mpiflow.info' not in sys.modules\n"
            "from mpiflow import info\nprint(info.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=60)
    assert out.stdout.strip() == "mpiflow.info", out.stderr


def test_a_script_run_as_tensorflow_fails_at_the_unsupported_line():
    code = ("from mpiflow.run import alias_tensorflow; alias_tensorflow()\n"
            "import tensorflow.compat.v1 as tf\n"
            "x = tf.placeholder(tf.float32, [None])\n"
            "tf.contrib.layers.fully_connected(x, 3)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO_ROOT, timeout=60)
    assert out.returncode != 0
    assert "line 4" in out.stderr
    assert "UnsupportedAPIError: mpiflow does not support tf.contrib" in out.stderr


@pytest.mark.parametrize("use,unrelated", [
    (lambda: mf.serialize_sparse, "variable_scope"),   # difflib ratio 0.6 once suggested it
    (lambda: mf.CriticalSection, "get_collection"),
    (lambda: mf.autograph, "get_default_graph"),
])
def test_an_unrelated_name_is_not_suggested(use, unrelated):
    with pytest.raises(mf.errors.UnsupportedAPIError) as info:
        use()
    assert "did you mean" not in str(info.value) and unrelated not in str(info.value)


@pytest.mark.parametrize("use,suggested", [
    (lambda: mf.reduce_sun, r"did you mean tf\.reduce_sum\?"),
    (lambda: mf.get_varible, r"did you mean tf\.get_variable\?"),
    (lambda: mf.tahn, r"did you mean tf\.tanh\?"),           # two letters swapped
    (lambda: mf.train.AdamOptimzer, r"did you mean tf\.train\.AdamOptimizer\?"),
])
def test_a_typo_still_gets_the_name_it_misspells(use, suggested):
    with pytest.raises(mf.errors.UnsupportedAPIError, match=suggested):
        use()
