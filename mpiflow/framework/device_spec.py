"""DeviceSpec: parse, merge and print device strings as TensorFlow does.

A full device reads ``/job:worker/replica:0/task:1/device:GPU:0``; every field may be
missing in a partial spec. The legacy forms ``/cpu:0`` and ``/gpu:1`` are accepted.
"""

from __future__ import annotations

import re

from mpiflow import errors

_FIELD = re.compile(r"^(job|replica|task|device):(.+)$")
_LEGACY = re.compile(r"^(cpu|gpu|CPU|GPU)(?::(\d+|\*))?$")
_DEVICE = re.compile(r"^(CPU|GPU|cpu|gpu)(?::(\d+|\*))?$")


class DeviceSpec:
    """A (possibly partial) device: job, replica, task, device type and index."""

    __slots__ = ("job", "replica", "task", "device_type", "device_index")

    def __init__(self, job=None, replica=None, task=None, device_type=None, device_index=None):
        self.job = job
        self.replica = None if replica is None else int(replica)
        self.task = None if task is None else int(task)
        self.device_type = None if device_type is None else device_type.upper()
        self.device_index = None if device_index is None else int(device_index)

    @classmethod
    def from_string(cls, spec: str) -> "DeviceSpec":
        """Parse a device string; raise ``InvalidArgumentError`` naming the bad part."""
        return cls().parse_from_string(spec)

    def parse_from_string(self, spec: str) -> "DeviceSpec":
        """Fill this spec from ``spec`` (TensorFlow's in-place parse) and return self."""
        if spec is None:
            return self
        if not isinstance(spec, str):
            raise errors.InvalidArgumentError(
                f"Device must be a string, DeviceSpec or device function, got {spec!r}")
        seen_device = False
        for part in filter(None, spec.strip().split("/")):
            field = _FIELD.match(part)
            legacy = _LEGACY.match(part)
            if legacy or (field and field.group(1) == "device"):
                # TensorFlow refuses a second device part, even one naming the same type.
                if seen_device:
                    raise errors.InvalidArgumentError(
                        f"Invalid device '{spec}': expected at most one device part "
                        f"(/device:CPU:N or /cpu:N), got a second one, '{part}'")
                seen_device = True
            if legacy:
                self._set_device(legacy.group(1), legacy.group(2), spec)
            elif field and field.group(1) == "device":
                dev = _DEVICE.match(field.group(2))
                if not dev:
                    raise errors.InvalidArgumentError(
                        f"Invalid device '{spec}': expected device:CPU|GPU[:index], "
                        f"got '{part}'")
                self._set_device(dev.group(1), dev.group(2), spec)
            elif field:
                name, value = field.groups()
                if name == "job":
                    if ":" in value:
                        raise errors.InvalidArgumentError(
                            f"Invalid device '{spec}': expected /job:NAME with no ':' in "
                            f"NAME, got '{part}'")
                    self.job = value
                else:
                    if not value.isdigit():
                        raise errors.InvalidArgumentError(
                            f"Invalid device '{spec}': expected an integer {name}, got "
                            f"'{value}'")
                    setattr(self, name, int(value))
            else:
                raise errors.InvalidArgumentError(
                    f"Invalid device '{spec}': expected parts like /job:NAME, /replica:N, "
                    f"/task:N, /device:CPU:N or /gpu:N, got '{part}'")
        return self

    def _set_device(self, kind, index, spec):
        self.device_type = kind.upper()
        self.device_index = None if index in (None, "*") else int(index)

    def replace(self, **kwargs) -> DeviceSpec:
        """Return a new spec with the given fields (``job``, ``replica``, ``task``,
        ``device_type``, ``device_index``) set to new values (None clears one); this spec
        is unchanged."""
        unknown = sorted(set(kwargs) - set(self.__slots__))
        if unknown:
            raise TypeError(f"DeviceSpec.replace() got unexpected keyword argument(s) "
                            f"{', '.join(unknown)}; expected some of "
                            f"{', '.join(self.__slots__)}")
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(kwargs)
        return DeviceSpec(**fields)

    def merge_from(self, other: "DeviceSpec") -> "DeviceSpec":
        """Override this spec's fields with the fields ``other`` sets; return self."""
        for name in self.__slots__:
            value = getattr(other, name)
            if value is not None:
                setattr(self, name, value)
        return self

    def make_merged_spec(self, other: "DeviceSpec") -> "DeviceSpec":
        """Return a new spec: this one with ``other``'s set fields on top."""
        return self.copy().merge_from(other)

    def copy(self) -> "DeviceSpec":
        return DeviceSpec(self.job, self.replica, self.task, self.device_type,
                          self.device_index)

    def to_string(self) -> str:
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
        if self.replica is not None:
            parts.append(f"/replica:{self.replica}")
        if self.task is not None:
            parts.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else self.device_index
            parts.append(f"/device:{self.device_type}:{index}")
        return "".join(parts)

    def __str__(self):
        return self.to_string()

    def __repr__(self):
        return f"DeviceSpec({self.to_string()!r})"

    def __eq__(self, other):
        if isinstance(other, str):
            other = DeviceSpec.from_string(other)
        if not isinstance(other, DeviceSpec):
            return NotImplemented
        return self.to_string() == other.to_string()

    def __hash__(self):
        return hash(self.to_string())


def canonical(spec) -> str:
    """Return the canonical string of a device string or DeviceSpec ('' for none)."""
    if spec is None or spec == "":
        return ""
    if isinstance(spec, DeviceSpec):
        return spec.to_string()
    return DeviceSpec.from_string(spec).to_string()


def job_and_task(device: str) -> tuple:
    """``(job, task)`` of a device string, None for a field it leaves open: the task a
    placed op or variable lives on."""
    spec = DeviceSpec.from_string(device or "")
    return spec.job, spec.task


def merge_device(base: str, override: str) -> str:
    """Return ``base`` with the fields ``override`` sets on top (both device strings)."""
    if not override:
        return base
    if not base:
        return canonical(override)
    return DeviceSpec.from_string(base).merge_from(DeviceSpec.from_string(override)).to_string()
