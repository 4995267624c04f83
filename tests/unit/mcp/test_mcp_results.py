"""MCP tool results as tool-message text (tether.mcp.results.shaped_result): text passes through,
images, audio and blobs become one line each, structured content shows only where no text block
carries it, errors are carried and long text is cut with an exact note."""

from __future__ import annotations

import base64
from typing import Any

import mcp_types as types

from tether.mcp.results import shaped_result
from tether.sandbox.toolbox import ToolResult

Block = (
    types.TextContent | types.ImageContent | types.AudioContent | types.ResourceLink | types.EmbeddedResource
)


def _result(*content: Block, structured: Any = None, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structured_content=structured, is_error=is_error)


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _b64(size: int) -> str:
    return base64.b64encode(bytes(size)).decode()


def test_text_passes_through() -> None:
    assert shaped_result(_result(_text("On branch main")), limit=1000) == ToolResult("On branch main")


def test_text_blocks_are_joined_by_newlines() -> None:
    shaped = shaped_result(_result(_text("first"), _text("second"), _text("third")), limit=1000)
    assert shaped.content == "first\nsecond\nthird"


def test_empty_text_blocks_add_no_blank_lines() -> None:
    shaped = shaped_result(_result(_text("first"), _text(""), _text("second")), limit=1000)
    assert shaped.content == "first\nsecond"


def test_image_is_summarised_with_mime_type_and_decoded_size() -> None:
    image = types.ImageContent(type="image", data=_b64(2048), mime_type="image/png")
    assert shaped_result(_result(image), limit=1000).content == "[image: image/png, 2.0 KB]"


def test_audio_is_summarised_with_mime_type_and_decoded_size() -> None:
    audio = types.AudioContent(type="audio", data=_b64(100), mime_type="audio/wav")
    assert shaped_result(_result(audio), limit=1000).content == "[audio: audio/wav, 100 bytes]"


def test_sizes_in_kilobytes_and_megabytes() -> None:
    kb = types.ImageContent(type="image", data=_b64(1536), mime_type="image/jpeg")
    mb = types.ImageContent(type="image", data=_b64(3 * 1024 * 1024), mime_type="image/jpeg")
    just_under = types.ImageContent(type="image", data=_b64(1023), mime_type="image/jpeg")
    shaped = shaped_result(_result(kb, mb, just_under), limit=1000)
    assert shaped.content == (
        "[image: image/jpeg, 1.5 KB]\n[image: image/jpeg, 3.0 MB]\n[image: image/jpeg, 1023 bytes]"
    )


def test_image_base64_is_never_shown() -> None:
    data = base64.b64encode(b"\x89PNG" + bytes(4000)).decode()
    image = types.ImageContent(type="image", data=data, mime_type="image/png")
    shaped = shaped_result(_result(image), limit=100_000)
    assert data[:40] not in shaped.content
    assert len(shaped.content) < 100


def test_undecodable_base64_is_sized_by_its_characters() -> None:
    image = types.ImageContent(type="image", data="abc", mime_type="image/png")
    assert shaped_result(_result(image), limit=1000).content == "[image: image/png, 3 bytes]"


def test_resource_link_is_one_line() -> None:
    link = types.ResourceLink(
        type="resource_link", uri="file:///repo/README.md", name="README.md", description="the readme"
    )
    assert shaped_result(_result(link), limit=1000).content == (
        "[resource: file:///repo/README.md (README.md) - the readme]"
    )


def test_resource_link_without_description() -> None:
    link = types.ResourceLink(type="resource_link", uri="file:///repo/a.py", name="a.py")
    assert shaped_result(_result(link), limit=1000).content == "[resource: file:///repo/a.py (a.py)]"


def test_embedded_text_resource_is_its_text() -> None:
    resource = types.TextResourceContents(uri="file:///repo/a.py", mime_type="text/x-python", text="x = 1\n")
    embedded = types.EmbeddedResource(type="resource", resource=resource)
    assert shaped_result(_result(embedded), limit=1000).content == "x = 1\n"


def test_embedded_blob_resource_is_summarised() -> None:
    blob = types.BlobResourceContents(uri="file:///repo/a.bin", mime_type="application/zip", blob=_b64(2048))
    embedded = types.EmbeddedResource(type="resource", resource=blob)
    assert shaped_result(_result(embedded), limit=1000).content == (
        "[resource: file:///repo/a.bin, application/zip, 2.0 KB]"
    )


def test_embedded_blob_resource_without_mime_type() -> None:
    blob = types.BlobResourceContents(uri="file:///repo/a.bin", blob=_b64(10))
    embedded = types.EmbeddedResource(type="resource", resource=blob)
    assert shaped_result(_result(embedded), limit=1000).content == "[resource: file:///repo/a.bin, 10 bytes]"


def test_mixed_blocks_keep_their_order() -> None:
    image = types.ImageContent(type="image", data=_b64(10), mime_type="image/gif")
    shaped = shaped_result(_result(_text("before"), image, _text("after")), limit=1000)
    assert shaped.content == "before\n[image: image/gif, 10 bytes]\nafter"


def test_structured_content_is_compact_json_when_there_is_no_text() -> None:
    structured = {"branch": "main", "dirty": False, "files": ["a.py", "b.py"], "note": "café"}
    shaped = shaped_result(_result(structured=structured), limit=1000)
    assert shaped.content == '{"branch":"main","dirty":false,"files":["a.py","b.py"],"note":"café"}'


def test_structured_content_follows_non_text_blocks() -> None:
    image = types.ImageContent(type="image", data=_b64(10), mime_type="image/png")
    shaped = shaped_result(_result(image, structured={"width": 2}), limit=1000)
    assert shaped.content == '[image: image/png, 10 bytes]\n{"width":2}'


def test_structured_content_is_left_out_when_a_text_block_carries_it() -> None:
    shaped = shaped_result(_result(_text('{"branch": "main"}'), structured={"branch": "main"}), limit=1000)
    assert shaped.content == '{"branch": "main"}'


def test_falsy_structured_content_is_still_shown() -> None:
    assert shaped_result(_result(structured={}), limit=1000).content == "{}"
    assert shaped_result(_result(structured=0), limit=1000).content == "0"


def test_is_error_is_carried() -> None:
    shaped = shaped_result(_result(_text("fatal: not a git repository"), is_error=True), limit=1000)
    assert shaped == ToolResult("fatal: not a git repository", is_error=True)


def test_success_is_not_an_error() -> None:
    assert shaped_result(_result(_text("ok")), limit=1000).is_error is False


def test_empty_result_says_the_tool_returned_nothing() -> None:
    assert shaped_result(_result(), limit=1000) == ToolResult("(the tool returned nothing)")
    assert shaped_result(_result(_text("")), limit=1000) == ToolResult("(the tool returned nothing)")


def test_empty_error_result_says_the_tool_failed() -> None:
    shaped = shaped_result(_result(is_error=True), limit=1000)
    assert shaped == ToolResult("(the tool failed and said nothing)", is_error=True)


def test_text_at_the_limit_is_not_cut() -> None:
    text = "x" * 100
    assert shaped_result(_result(_text(text)), limit=100).content == text


def test_text_past_the_limit_is_cut_with_an_exact_note() -> None:
    text = "".join(str(i % 10) for i in range(250))
    shaped = shaped_result(_result(_text(text)), limit=100)
    assert shaped.content == f"{text[:100]}\n[truncated 150 chars]"


def test_truncation_counts_the_joined_text() -> None:
    shaped = shaped_result(_result(_text("a" * 60), _text("b" * 60)), limit=100)
    # 60 + 1 (the joining newline) + 60 = 121 characters, 21 of them past the limit
    assert shaped.content == "a" * 60 + "\n" + "b" * 39 + "\n[truncated 21 chars]"


def test_truncation_keeps_the_error_flag() -> None:
    shaped = shaped_result(_result(_text("e" * 50), is_error=True), limit=10)
    assert shaped == ToolResult("e" * 10 + "\n[truncated 40 chars]", is_error=True)
