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


def test_replace_returns_a_new_spec_with_the_given_fields():
    # TF2's DeviceSpecV2.replace, also on tf.compat.v1.DeviceSpec
    spec = mf.DeviceSpec.from_string("/job:ps/task:1/device:CPU:0")
    replaced = spec.replace(job="worker", device_type="GPU", device_index=1)
    assert replaced.to_string() == "/job:worker/task:1/device:GPU:1"
    assert spec.to_string() == "/job:ps/task:1/device:CPU:0"
    assert spec.replace().to_string() == "/job:ps/task:1/device:CPU:0"
    assert spec.replace(task=None).to_string() == "/job:ps/device:CPU:0"
    with pytest.raises(TypeError, match="bogus"):
        spec.replace(bogus=1)


@pytest.mark.parametrize("text,expected", [
    ("/job:ps/cpu:0/gpu:1", "at most one device part"),
    ("/cpu:0/cpu:1", "at most one device part"),
    ("/job:ps/cpu:0/cpu:0", "at most one device part"),
    ("/device:CPU:0/device:GPU:0", "at most one device part"),
    ("/cpu:0/device:CPU:0", "at most one device part"),
    ("/job:a:b", "no ':' in NAME"),
])
def test_device_strings_tensorflow_refuses_are_refused(text, expected):
    with pytest.raises(mf.errors.InvalidArgumentError) as info:
        mf.DeviceSpec.from_string(text)
    assert text in str(info.value) and expected in str(info.value)


@pytest.mark.parametrize("text,expected", [
    ("/job:ps/replica:0/task:1/device:GPU:0", "/job:ps/replica:0/task:1/device:GPU:0"),
    ("/device:CPU:0", "/device:CPU:0"),
    ("/job:a/job:b", "/job:b"),          # TF: a repeated job, replica or task: last wins
    ("/task:1/task:2", "/task:2"),
    ("/job:ps", "/job:ps"),
    ("/gpu:*", "/device:GPU:*"),
])
def test_device_strings_tensorflow_accepts_still_parse(text, expected):
    assert mf.DeviceSpec.from_string(text).to_string() == expected
