"""A from/to pair in the request's order, a command the request gives whole, a file named after its tool."""

from __future__ import annotations

from tether.chat import reads_as_failure
from tether.guardrails.said_values import apart, ordered_pairs, whole_commands, written_objects
from tether.selection.grounded import Grounding, check_call

EDIT = {"filePath": {}, "oldString": {}, "newString": {}, "replaceAll": {}}
ASK = "In settings.txt, change the line color = red to color = blue"


def test_a_swapped_pair_goes_back_into_the_requests_order() -> None:
    swapped = {"filePath": "settings.txt", "oldString": "color = blue", "newString": "color = red"}
    assert ordered_pairs(swapped, EDIT, ASK) == {"oldString": "color = red", "newString": "color = blue"}
    money = {"from_currency": {}, "to_currency": {}}
    assert ordered_pairs({"from_currency": "EUR", "to_currency": "USD"}, money, "100 USD to EUR") == {
        "from_currency": "USD",
        "to_currency": "EUR",
    }
    # In order already, or not both the request's: left as written.
    assert ordered_pairs({"oldString": "color = red", "newString": "color = blue"}, EDIT, ASK) == {}
    assert ordered_pairs({"oldString": "a", "newString": "b"}, EDIT, "make it better") == {}
    assert ordered_pairs({"source": "b", "target": "a"}, {"source": {}, "target": {}}, "copy a to b") == {
        "source": "a",
        "target": "b",
    }


def test_a_change_to_itself_takes_both_sides_of_the_requests_link() -> None:
    for same in ("color = blue", "color = red", "file.txt", "color"):
        assert ordered_pairs({"oldString": same, "newString": same}, EDIT, ASK) == {
            "oldString": "color = red",
            "newString": "color = blue",
        }, same
    assert ordered_pairs({"oldString": "x", "newString": "x"}, EDIT, "replace foo with bar and save.") == {
        "oldString": "foo",
        "newString": "bar",
    }
    # No link, or more than one: nothing to go by.
    assert ordered_pairs({"oldString": "hi", "newString": "hi"}, EDIT, "Create hello.txt containing hi") == {}
    assert ordered_pairs({"oldString": "x", "newString": "x"}, EDIT, "change a to b to c") == {}


def test_a_command_the_request_gives_is_run_whole() -> None:
    ask = 'Run the command python3 -c "print(6*7*1001)" and tell me what it printed.'
    props = {"command": {}, "description": {}}
    assert whole_commands({"command": "print(6*7*1001)", "description": "x"}, props, ask) == {
        "command": 'python3 -c "print(6*7*1001)"'
    }
    assert whole_commands({"command": 'python3 -c "print(6*7*1001)"'}, props, ask) == {}
    assert whole_commands({"command": "ls"}, props, ask) == {}  # not a part of the given command
    assert whole_commands({"description": "print"}, props, ask) == {}


def test_a_file_named_after_its_tool_is_not_said() -> None:
    read = {"type": "object", "properties": {"filepath": {"type": "string"}}, "required": ["filepath"]}
    spoken = Grounding.of("Use the Read tool to read files. JSON is fine.\nWhich version is in VERSION.txt?")
    assert check_call({"filepath": "Read.json"}, read, spoken, "Read").unsaid == ("filepath",)
    assert check_call({"filepath": "VERSION.txt"}, read, spoken, "Read").unsaid == ()
    # Written in the text, it is said whatever its name.
    assert check_call({"filepath": "Read.json"}, read, Grounding.of("open Read.json"), "Read").unsaid == ()


def test_agents_tools_failures_read_as_failures() -> None:
    for text in (
        "Could not find oldString in the file.",
        "File not found: /work/a.txt",
        "ENOENT: no such file or directory, lstat '/work/hello.txt'",
        "Error: boom",
        "cannot open x",
    ):
        assert reads_as_failure(text), text
    for text in ("Edit applied successfully.", "42042\n", "The file could not be happier", "Enough said"):
        assert not reads_as_failure(text), text


def test_a_value_running_into_another_parameters_value_keeps_its_own_words() -> None:
    props = {"location": {}, "date": {}, "hotel": {}, "state": {}}
    assert apart({"location": "London 2022/08/16", "date": "2022/08/16"}, props) == {"location": "London"}
    assert apart({"hotel": "Sheraton Hotel in New York", "location": "New York"}, props) == {
        "hotel": "Sheraton Hotel"
    }
    assert apart({"location": "2022/08/16 in London", "date": "2022/08/16"}, props) == {"location": "London"}
    # A qualifier after a comma is the value's own shape ("City, ST"), and equal values are not parts.
    assert apart({"location": "San Francisco, CA", "state": "CA"}, props) == {}
    assert apart({"location": "New York", "hotel": "New York"}, props) == {}
    assert apart({"location": "London 2022", "date": 2022}, props) == {}  # strings only
    edit = {"oldString": {}, "newString": {}}
    assert apart({"oldString": "color = red", "newString": "red"}, edit) == {}  # code keeps its words
    search = {"query": {}, "location": {}}
    assert apart({"query": "pizza in New York", "location": "New York"}, search) == {}  # a query is whole


def test_an_object_parameter_holding_its_schema_takes_the_object_the_request_writes() -> None:
    props = {"gradeDict": {"type": "object", "description": "A dictionary of subjects and scores"}}
    echoed = {"gradeDict": {"type": "object", "description": "A dictionary of subjects and scores"}}
    ask = "The average grade for these scores {'math':90, 'science':75} across subjects."
    assert written_objects(echoed, props, ask) == {"gradeDict": {"math": 90, "science": 75}}
    assert written_objects(echoed, props, "The average grade of John") == {}  # no object written
    assert written_objects({"gradeDict": {"math": 90}}, props, ask) == {}  # a value already
    # A tool that takes a schema gets one: its own properties name the keys.
    schema_tool = {"schema": {"type": "object", "properties": {"type": {}, "description": {}}}}
    assert written_objects({"schema": {"type": "string", "description": "x"}}, schema_tool, ask) == {}
    dated = {"start_date": {}, "room_type": {}}
    assert apart({"start_date": "10th December 2022", "room_type": "2022"}, dated) == {}  # a date is whole
