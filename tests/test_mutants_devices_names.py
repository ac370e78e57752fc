"""Laws of device names (``turnout.devices.names``): TensorFlow's syntax parsed into a ``DeviceSpec``,
a missing part read as the local one, and a name that is not a device an error that says so. Each
law kills mutants of the full set of ``devices/names.py`` (issue 40, part 3; ``python
tools/mutation.py --module devices/names.py --all``): a part of the pattern misspelt, a part dropped
or defaulted to the wrong value, the short form's leading slash added wrongly, a guard inverted, an
error that lost its message. Strings only: each test takes microseconds.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnout.devices.names import DeviceSpec, canonical, parse
from turnout.errors import PlacementError

#: names in every accepted form, and the (job, task, type, index) each one means
FORMS = [
    ("/job:worker/task:1/device:GPU:2", ("worker", 1, "GPU", 2)),
    ("/job:worker/replica:0/task:3/device:CPU:1", ("worker", 3, "CPU", 1)),
    ("/job:ps.v-2_a", ("ps.v-2_a", 0, "CPU", 0)),
    ("/job:ps/task:4", ("ps", 4, "CPU", 0)),
    ("/task:2", ("localhost", 2, "CPU", 0)),
    ("/task:2/gpu:1", ("localhost", 2, "GPU", 1)),
    ("/device:gpu:3", ("localhost", 0, "GPU", 3)),
    ("/gpu:3", ("localhost", 0, "GPU", 3)),
    ("gpu:3", ("localhost", 0, "GPU", 3)),
    ("Tpu:0", ("localhost", 0, "TPU", 0)),
    ("  cpu:7 ", ("localhost", 0, "CPU", 7)),
    ("/job:localhost/task:0/device:CPU:0", ("localhost", 0, "CPU", 0)),
]


@pytest.mark.parametrize(("name", "parts"), FORMS)
def test_each_form_names_its_job_task_type_and_index(name: str, parts: tuple[str, int, str, int]) -> None:
    """Every part is optional; a missing job is ``localhost``, a missing task or index 0, a missing
    type ``CPU``; a type is upper-cased, a replica ignored, a short name read as if it began with
    ``/``. Kills each group of the pattern renamed or its letters' case changed, each part dropped
    from the spec or read from a misspelt group, each default mutated, the tests of a missing task or
    index forced or inverted, the type lower-cased, and the leading slash never or always added."""
    spec = parse(name)
    assert (spec.job, spec.task, spec.type, spec.index) == parts
    assert spec == DeviceSpec(*parts)
    assert canonical(name) == f"/job:{parts[0]}/task:{parts[1]}/device:{parts[2]}:{parts[3]}"


def test_a_spec_is_parsed_to_itself_and_its_defaults_are_the_local_cpu() -> None:
    """A DeviceSpec given to ``parse`` is returned as it is, and a DeviceSpec made with parts
    missing means what ``parse`` makes of a name with those parts missing: the local task's first
    CPU. Kills the dataclass's defaults mutated and ``canonical`` parsing None."""
    spec = DeviceSpec("worker", 1, "GPU", 2)
    assert parse(spec) is spec
    assert canonical(spec) == "/job:worker/task:1/device:GPU:2"
    assert DeviceSpec() == parse("cpu:0")
    assert DeviceSpec(job="ps") == parse("/job:ps")
    assert DeviceSpec(task=3) == parse("/task:3")
    assert DeviceSpec(type="GPU") == parse("gpu:0")
    assert DeviceSpec(index=4) == parse("cpu:4")


@pytest.mark.parametrize("bad", ["", "   ", 3, None, b"cpu:0"])
def test_a_name_that_is_no_non_empty_string_is_refused_as_such(bad: Any) -> None:
    """Anything but a non-empty string (and not a DeviceSpec) is a PlacementError saying what a
    device name must be. Kills the guard's ``or`` made ``and`` and either test inverted, and the
    message dropped."""
    with pytest.raises(PlacementError) as e:
        parse(bad)
    assert str(e.value) == f"a device name must be a non-empty string, got {bad!r}"


@pytest.mark.parametrize("bad", ["/", "cpu", "cpu:x", "/job:/task:1", "device:CPU", "//cpu:0", "/task:1/job:w",
                                 "/job:w/task:1/device:CPU:0/x", "cpu:1 gpu:2"])
def test_a_string_that_is_no_device_name_is_refused_with_the_forms_to_write(bad: str) -> None:
    """A string the pattern does not match, or matches with no part at all (``/``), is a
    PlacementError naming it and showing the forms to write. Kills the match's and the empty
    match's tests inverted or joined by ``and``, and the message dropped."""
    with pytest.raises(PlacementError) as e:
        parse(bad)
    assert str(e.value) == (f"cannot parse device name {bad!r}; write it like '/job:worker/task:1/device:CPU:0' "
                            "or 'cpu:1'")
