"""GraphDef: a graph as plain data, round-tripped through msgpack and re-run."""

import msgpack
import numpy as np
import pytest

import mpiflow as mf


def _model():
    mf.set_random_seed(5)
    x = mf.placeholder(mf.float32, [None, 3], name="x")
    with mf.device("/job:worker/task:0"):
        w = mf.get_variable("w", [3, 2])
        y = mf.reduce_sum(mf.matmul(x, w) * mf.constant([1.0, 2.0]), name="y")
    return x, w, y


def test_graph_def_is_plain_msgpack_data():
    _model()
    gd = mf.get_default_graph().as_graph_def()
    packed = msgpack.packb(gd, use_bin_type=True)
    assert msgpack.unpackb(packed, raw=False) == gd
    node = next(n for n in gd["node"] if n["name"] == "w")
    assert node["op"] == "VariableV2" and node["device"] == "/job:worker/task:0"
    assert node["attr"]["shape"] == {"shape": [3, 2]}


def test_round_trip_reproduces_the_computation():
    x, _, y = _model()
    gd = msgpack.unpackb(msgpack.packb(mf.get_default_graph().as_graph_def()), raw=False)
    feed = np.arange(6, dtype=np.float32).reshape(2, 3)
    with mf.Session() as sess:
        sess.run(mf.global_variables_initializer())
        expected = sess.run(y, {x: feed})
    g2 = mf.Graph()
    with g2.as_default():
        init, y2 = mf.import_graph_def(gd, return_elements=["w/Assign", "y:0"], name="")
        with mf.Session() as sess:
            sess.run(init)
            assert sess.run(y2, {"x:0": feed}) == pytest.approx(expected)
    ops1 = [(n["name"], n["op"], n["input"], n["device"]) for n in gd["node"]]
    ops2 = [(n["name"], n["op"], n["input"], n["device"]) for n in g2.as_graph_def()["node"]]
    assert ops1 == ops2


def test_import_prefixes_names_and_maps_inputs():
    a = mf.placeholder(mf.float32, [2], name="a")
    mf.identity(a * 3.0, name="out")
    gd = mf.get_default_graph().as_graph_def()
    g2 = mf.Graph()
    with g2.as_default():
        src = mf.constant([1.0, 2.0], name="src")
        out, = mf.import_graph_def(gd, input_map={"a:0": src}, return_elements=["out:0"],
                                   name="copy")
        assert out.name == "copy/out:0"
        with mf.Session() as sess:
            np.testing.assert_allclose(sess.run(out), [3.0, 6.0])


def test_unknown_op_type_in_graph_def_is_rejected():
    gd = {"node": [{"name": "n", "op": "Frobnicate", "input": [], "device": "", "attr": {},
                    "output": []}]}
    with pytest.raises(mf.errors.NotFoundError, match="Frobnicate"):
        mf.import_graph_def(gd)


def test_malformed_graph_def_is_rejected():
    with pytest.raises(mf.errors.InvalidArgumentError, match="missing"):
        mf.import_graph_def({"node": [{"name": "n"}]})
    with pytest.raises(mf.errors.InvalidArgumentError, match="names no node"):
        mf.import_graph_def({"node": [{"name": "n", "op": "Identity", "input": ["ghost:0"],
                                       "device": "", "attr": {}, "output": []}]})
    bad_tensor = {"tensor": {"dtype": "float32", "shape": [4], "data": b"\x00" * 3}}
    with pytest.raises(mf.errors.DataLossError, match="expected 16 bytes"):
        mf.import_graph_def({"node": [{"name": "c", "op": "Const", "input": [], "device": "",
                                       "attr": {"value": bad_tensor,
                                                "dtype": {"dtype": "float32"}},
                                       "output": [{"dtype": "float32", "shape": [4]}]}]})


def test_scalar_constants_keep_their_shape_through_a_round_trip():
    mf.constant(3.0, name="scalar")
    gd = msgpack.unpackb(msgpack.packb(mf.get_default_graph().as_graph_def()), raw=False)
    g2 = mf.Graph()
    with g2.as_default():
        c, = mf.import_graph_def(gd, return_elements=["scalar:0"], name="")
        assert c.op.get_attr("value").shape == ()


def _identity_graph_def():
    with mf.Graph().as_default() as g:
        a = mf.placeholder(mf.float32, [2], name="a")
        mf.identity(a * 2.0, name="b")
    return g.as_graph_def()


def test_input_map_keys_must_name_an_output_of_the_graph_def():
    gd = _identity_graph_def()
    with pytest.raises(mf.errors.InvalidArgumentError, match="'nosuch:0' names no output"):
        mf.import_graph_def(gd, input_map={"nosuch:0": mf.constant([1.0, 2.0])})
    with pytest.raises(mf.errors.InvalidArgumentError, match="'a:1' names no output"):
        mf.import_graph_def(gd, input_map={"a:1": mf.constant([1.0, 2.0])})


def test_input_map_refuses_a_tensor_of_another_dtype():
    with pytest.raises(mf.errors.InvalidArgumentError,
                       match=r"maps 'a:0' \(float32\) to tensor 'Const:0' of dtype int32"):
        mf.import_graph_def(_identity_graph_def(), input_map={"a:0": mf.constant([1, 2])})


def test_input_map_key_without_index_means_output_0_and_values_are_converted():
    b, = mf.import_graph_def(_identity_graph_def(), input_map={"a": [1.0, 5.0]},
                             return_elements=["b:0"])
    with mf.Session() as sess:
        np.testing.assert_allclose(sess.run(b), [2.0, 10.0])


def test_input_map_re_infers_the_shapes_downstream_of_a_mapped_tensor():
    b, = mf.import_graph_def(_identity_graph_def(),
                             input_map={"a:0": mf.constant([1.0, 2.0, 3.0])},
                             return_elements=["b:0"])
    assert b.shape.as_list() == [3]
    with mf.Session() as sess:
        assert sess.run(b).shape == (3,)


def test_import_prefix_is_a_unique_name_scope_inside_the_current_one():
    gd = _identity_graph_def()
    mf.constant(0.0, name="import")
    assert mf.import_graph_def(gd, return_elements=["b:0"])[0].name == "import_1/b:0"
    assert mf.import_graph_def(gd, name="p", return_elements=["b:0"])[0].name == "p/b:0"
    assert mf.import_graph_def(gd, name="p", return_elements=["b:0"])[0].name == "p_1/b:0"
    with mf.name_scope("outer"):
        assert mf.import_graph_def(gd, return_elements=["b:0"])[0].name == \
            "outer/import/b:0"
        assert mf.import_graph_def(gd, name="", return_elements=["b:0"])[0].name == "b:0"
    assert mf.import_graph_def(gd, name="p/", return_elements=["b:0"])[0].name == "p/b_1:0"
