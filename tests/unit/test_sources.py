"""Where a value nobody said comes from: the offered tool that gives it."""

from __future__ import annotations

from tether.grammar.formats.base import ToolSpec
from tether.selection.sources import narrowed_source, source_tool


def tool(name: str, description: str) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": {}})


FIND = tool("find_orders", "Find the user's orders for an item; returns order ids and statuses.")
CANCEL = tool("cancel_order", "Cancel an order by its numeric id (use find_orders to get it).")
SEARCH = tool("search_products", "Search the shop catalogue; returns product ids.")
ADD = tool("add_to_cart", "Add a product to the cart by product id.")
WEATHER = tool("get_weather", "The weather in a city.")


def test_the_tool_the_description_names_gives_it() -> None:
    assert source_tool(CANCEL, ["order_id"], [CANCEL, FIND, WEATHER]) is FIND


def test_else_the_one_tool_that_speaks_of_the_value() -> None:
    assert source_tool(ADD, ["product_id"], [ADD, SEARCH, WEATHER]) is SEARCH
    assert source_tool(ADD, ["quantity"], [ADD, SEARCH, WEATHER]) is None
    assert (
        source_tool(ADD, ["product_id"], [ADD, SEARCH, tool("list_products", "Lists product ids.")]) is None
    )
    assert source_tool(WEATHER, ["city"], [WEATHER]) is None  # never the tool itself


def test_the_source_is_asked_for_with_the_requests_own_words() -> None:
    find = ToolSpec(
        "find_orders",
        FIND.description,
        {
            "type": "object",
            "properties": {"item": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["item"],
        },
    )
    asked = narrowed_source(find, CANCEL, "Cancel my order for the lamp.")
    assert asked.parameters["properties"] == {"item": {"type": "string", "enum": ["lamp"]}}
    assert asked.parameters["required"] == ["item"] and asked.parameters["additionalProperties"] is False


def test_a_tool_that_takes_the_value_too_is_no_source() -> None:
    find = ToolSpec(
        "find_movies",
        "Search movies by location and genre.",
        {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    )
    times = ToolSpec(
        "get_times",
        "Get show times for a movie at a location.",
        {"type": "object", "properties": {"movie": {"type": "string"}, "location": {"type": "string"}}},
    )
    assert source_tool(find, ["location"], [find, times]) is None


def test_a_tool_named_by_a_plain_word_is_named_only_quoted_or_as_a_tool() -> None:
    # opencode's edit tool: "use your `Read` tool ... NEVER write new files unless required".
    read = tool("read", "Read a file or directory from the local filesystem.")
    write = tool("write", "Writes a file to the local filesystem.")
    edit = tool(
        "edit",
        "Performs exact string replacements in files. You must use your `Read` tool at least once "
        "before editing. ALWAYS prefer editing existing files. NEVER write new files unless required.",
    )
    assert source_tool(edit, ["filePath"], [read, write, edit]) is read
    plain = tool("edit", "Replaces text in a file. Never write new files.")
    assert source_tool(plain, ["filePath"], [read, write, plain]) is None
    assert source_tool(tool("edit", "Edit a file the read tool showed."), ["x"], [read, write]) is read


def test_a_source_file_parameter_is_asked_for_with_the_files_the_request_names() -> None:
    read = ToolSpec(
        "read",
        "Read a file.",
        {"type": "object", "properties": {"filePath": {"type": "string"}}, "required": ["filePath"]},
    )
    edit = tool("edit", "Replace text in a file you read with the `read` tool.")
    asked = narrowed_source(read, edit, "Which version number is written in VERSION.txt?")
    assert asked.parameters["properties"] == {"filePath": {"type": "string", "enum": ["VERSION.txt"]}}
