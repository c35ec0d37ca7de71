"""DeviceSpec parsing, merging and printing, as TensorFlow does it."""

import pytest

import mpiflow as mf


@pytest.mark.parametrize("text,expected", [
    ("/job:ps/task:0", "/job:ps/task:0"),
    ("/job:worker/replica:0/task:2/device:GPU:1", "/job:worker/replica:0/task:2/device:GPU:1"),
    ("/cpu:0", "/device:CPU:0"),
    ("/gpu:1", "/device:GPU:1"),
    ("/job:worker/device:CPU:*", "/job:worker/device:CPU:*"),
    ("", ""),
])
def test_parse_and_to_string_round_trip(text, expected):
    assert mf.DeviceSpec.from_string(text).to_string() == expected


def test_fields():
    spec = mf.DeviceSpec.from_string("/job:worker/task:3/device:GPU:2")
    assert (spec.job, spec.task, spec.device_type, spec.device_index) == ("worker", 3, "GPU", 2)
    assert spec.replica is None


def test_merge_overrides_only_set_fields():
    base = mf.DeviceSpec.from_string("/job:worker/task:1/device:CPU:0")
    merged = base.make_merged_spec(mf.DeviceSpec(device_type="GPU", device_index=0))
    assert merged.to_string() == "/job:worker/task:1/device:GPU:0"
    assert base.to_string() == "/job:worker/task:1/device:CPU:0"


@pytest.mark.parametrize("bad", ["/job:ps/task:x", "/jobs:ps", "/device:TPU:0", "/task:"])
def test_bad_specs_raise_naming_the_part(bad):
    with pytest.raises(mf.errors.InvalidArgumentError, match="Invalid device"):
        mf.DeviceSpec.from_string(bad)
