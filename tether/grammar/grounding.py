"""Grounded arguments: a strong, leavable preference for values the conversation actually contains.

Small models invent argument values (a city that was never mentioned, the tool's own name
as a string, ``[]``). Most values are spans of the request: names, places, numbers. While
the model writes the string or number value of an *extractive* parameter (a string or a
number without ``enum``, ``const`` or ``default``, and not a composed one such as a file's
``content`` or a shell ``command``: :func:`tether.schema_kinds.extractive_kind`),
:class:`GroundingProcessor` adds ``bias`` to every token that keeps the value a substring of the
conversation, and to the tokens that close it where it is a whole span (at a word boundary in the
text). It never masks: a value that needs a transformation (``50mH`` → ``0.05``, spelled-out
numbers) stays possible, only less likely than a copy.

:class:`SpanIndex` recognizes exactly the substrings of the conversation (as a suffix
automaton does, by the set of places a partial value occurs), indexed by the model's own
tokens once per request (:mod:`tether.grammar.spans`, which also keeps the ledger of spans a
reply's values already took). :class:`~tether.grammar.args_tracker.ArgsTracker` follows the
arguments as bytes arrive, so the processor knows which parameter's value is being written. A
number that is whole (a free number of the conversation) also has the tokens that end it preferred.
File names are copied whole (:mod:`tether.grammar.file_names`); in an agent loop the values come from
the latest round (:mod:`tether.grammar.recent`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from tether.coercion import schema_types
from tether.grammar.args_tracker import ArgsTracker
from tether.grammar.datetimes import date_spans, date_time_params, time_spans
from tether.grammar.file_names import FileNames, folder_mentions, whole_name_spans
from tether.grammar.formats.base import ToolSpec
from tether.grammar.recent import LatestRound
from tether.grammar.spans import (
    SpanIndex,
    SpanLedger,
    closest_records,
    counted_by,
    is_written_number,
    labelled_by,
    labelled_ids,
    readings_for,
)
from tether.grammar.vocab import TokenVocab
from tether.schema_kinds import (
    counted_nouns,
    examples,
    extractive_kind,
    identifier_words,
    name_words,
    names_a_file,
)

__all__ = ["GroundingProcessor"]


class GroundingProcessor:
    """The logits processor (chained after layer 0): see the module doc.

    ``listed`` is the byte range, in ``source``, of the list the request enumerates (if any):
    its spans are taken one per call (:class:`tether.grammar.spans.SpanLedger`). ``flags`` names,
    per tool, the boolean parameters the conversation mentions ("avoiding toll roads" for
    ``avoid_tolls``): ``true`` is preferred for them.
    """

    def __init__(
        self,
        vocab: TokenVocab,
        source: str,
        tools: Sequence[ToolSpec],
        *,
        prompt_len: int,
        opener: bytes = b'"arguments":',
        bias: float = 4.0,
        listed: tuple[int, int] | None = None,
        flags: Mapping[str, frozenset[str]] | None = None,
        answered: frozenset[tuple[str, str, str]] = frozenset(),
        request: str = "",
        latest: LatestRound | None = None,
        said: str = "",
    ) -> None:
        self.vocab = vocab
        text = source.encode("utf-8")
        self.index = SpanIndex(text, vocab, whole_name_spans(text, folder_mentions(said)))
        self.schemas: dict[str, Mapping[str, Any]] = {
            t.name: dict(t.parameters.get("properties") or {}) for t in tools
        }
        self.kinds = {
            name: {k: extractive_kind(v, k) for k, v in props.items()} for name, props in self.schemas.items()
        }
        self.file_params = {
            name: frozenset(k for k in props if names_a_file(k)) for name, props in self.schemas.items()
        }
        self.source = source
        self.examples = {
            name: {k: [e.encode("utf-8") for e in examples(v)] for k, v in props.items() if examples(v)}
            for name, props in self.schemas.items()
        }
        self.shapes = {
            name: date_time_params(props, self.kinds[name]) for name, props in self.schemas.items()
        }
        self._shape_at: dict[str, set[int]] = {}
        self._readings: dict[tuple[str, str], list[tuple[int, int, bytes]]] = {}
        self.tracker = ArgsTracker(opener, frozenset(self.kinds))
        self.ledger = SpanLedger(listed)
        self.files = FileNames(self.index, vocab, answered, said.encode("utf-8"))
        self.flags = flags or {}  # per tool, the boolean parameters the conversation mentions
        self.request = request
        self.latest = latest
        self.seen = prompt_len
        self.bias = bias
        self.boosted = 0
        self._mid_word = False  # this step's value ends inside a word of the text
        self._named_factor = 2.0  # this step's multiple of the bias for a file name or a date
        self._recorded = 0

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        n = len(ids)
        if n > self.seen:
            for tid in ids[self.seen : n].tolist():
                if 0 <= tid < self.vocab.size:
                    self.tracker.feed(self.vocab.pieces[tid])
            self.seen = n
            self._take_written()
        cut = self._cut_short()  # once per step: the boost and the penalty both need it
        # A file name is copied, never composed: its first token gets twice the preference, the rest
        # of a name begun three times (a name left midway names no file: "greetin.txt"), its end the
        # plain one (a path may go on: the directory a prompt names, then the file); the first token
        # of a name this tool already read (answered) costs twice the preference.
        self._named_factor = 2.0
        named, read = self._file_name_start()
        if named is None:
            named = self._shaped_start()
        self._mid_word = False
        boost, bias = (
            (named, self._named_factor * self.bias) if named is not None else (self._boost(cut), self.bias)
        )
        if boost is None:
            boost = self._option()
        if self._mid_word:
            bias *= 2
        if read is not None and read.size:
            logits[read] -= 2 * self.bias
        shown = self._example_start(boost)
        if shown is not None and shown.size:
            logits[shown] -= self.bias
        if boost is not None and boost.size:
            finite = boost[np.isfinite(logits[boost])]
            logits[finite] += bias
            self.boosted += 1
        if cut:
            logits[self.vocab.json_ends()] -= self.bias
        return logits

    def _cut_short(self) -> bool:
        """Is the number being written the digits of a reading this parameter does not take, with the
        reading it does take still ahead ("213" of "213 million")? Ending it there costs ``bias``."""
        tr = self.tracker
        key = tr.value_key()
        if tr.number is None or key is None or self._kind() != "number":
            return False
        so_far, call = bytes(tr.number), tr.calls - 1
        suited = self._suited(key)
        if so_far in {n for _, _, n in suited}:
            return False
        heads = [(a, b) for a, b, n in self.index.number_spans if n == so_far]
        return any(
            a <= x and y <= b and n.startswith(so_far) and self.ledger.free(a, b, call, key)
            for a, b, n in suited
            for x, y in heads
        )

    def _take_written(self) -> None:
        """Values finished since the last step take their spans in the ledger."""
        done = self.tracker.done
        for call, key, value in done[self._recorded :]:
            if is_written_number(value):
                spans = [(a, b) for a, b, n in self.index.number_spans if n == value]
            else:
                spans = [(e - len(value), e) for e in self.index.occurrences(value)] if value else []
            self.ledger.take(spans, call, key)
        self._recorded = len(done)

    def _kind(self) -> str | None:
        tr = self.tracker
        key = tr.value_key()
        if tr.tool is None or key is None:
            return None
        return self.kinds.get(tr.tool, {}).get(key)

    def _boost(self, cut: bool) -> npt.NDArray[np.int32] | None:
        tr = self.tracker
        kind = self._kind()
        key = tr.value_key()
        if key is not None and key in self.flags.get(tr.tool or "", ()) and self._at_value():
            return self.vocab.true_starts()
        if kind is None or key is None:
            return None
        call = tr.calls - 1
        if kind == "string" and self._before_string():
            blocked = self.ledger.blocked(call, key) | self._reserved(tr.tool or "", key)
            return self.index.opening(lambda p: p not in blocked)
        if tr.string is not None and kind == "string" and not tr.escaped and b"\\" not in tr.string:
            value = bytes(tr.string)
            if not value:
                return self.index.start_except(
                    self.ledger.blocked(call, key) | self._reserved(tr.tool or "", key)
                )
            ends = self.ledger.free_ends(self.index.occurrences(value), len(value), call, key)
            if not ends:
                return None  # the model left the text (or took a used span): no preference any more
            grow = self.index.continuations(ends)
            if self.index.at_boundary(ends):
                grow = np.union1d(grow, self.vocab.ids_starting_with(b'"'))
            else:  # a word begun is finished: "P" of "Put" goes on as "ut", not into "Premise"
                self._mid_word = True
            return grow
        if kind == "number" and tr.number is not None:
            return self._numbers(bytes(tr.number), call, key, cut)
        if kind == "number" and tr.string is None and tr.stack and tr.stack[-1].expect == "value":
            return self._numbers(b"", call, key, cut)
        return None

    def _file_name_start(self) -> tuple[npt.NDArray[np.int32] | None, npt.NDArray[np.int32] | None]:
        """At a file parameter's value: the tokens :class:`~tether.grammar.file_names.FileNames`
        prefers, and apart those it sets back (None, None elsewhere)."""
        tr = self.tracker
        key = tr.value_key()
        tool = tr.tool or ""
        if key is None or self._kind() != "string" or key not in self.file_params.get(tool, ()):
            return None, None
        opening = self._before_string()
        if tr.string and not tr.escaped and b"\\" not in tr.string:
            grow, going_on = self.files.rest(tool, key, bytes(tr.string))
            self._named_factor = 3.0 if going_on else 1.0
            return grow, None
        if not opening and tr.string is None:
            return None, None
        return self.files.first(tool, key, self.ledger.blocked(tr.calls - 1, key), opening)

    def _example_start(self, boost: npt.NDArray[np.int32] | None) -> npt.NDArray[np.int32] | None:
        """At the empty value of a string parameter whose schema gives examples ("Error code, e.g.
        E1234"): the tokens that begin an example and no span of the conversation (an example
        illustrates the schema; the user's value is elsewhere) — None elsewhere."""
        tr = self.tracker
        key = tr.value_key()
        if key is None or self._kind() != "string":
            return None
        opening = self._before_string()
        if not opening and tr.string != bytearray():
            return None
        shown = self.examples.get(tr.tool or "", {}).get(key)
        if not shown:
            return None
        ids: set[int] = set()
        for example in shown:
            for k in range(1, len(example) + 1):
                head = example[:k]
                ids.update(
                    self.vocab.ids_for(b'"' + head) + self.vocab.ids_for(b' "' + head)
                    if opening
                    else self.vocab.ids_for(head)
                )
        out = np.asarray(sorted(ids), dtype=np.int32)
        return np.setdiff1d(out, boost) if boost is not None else out

    def _shape_starts(self, shape: str) -> set[int]:
        """Where the text writes a date (``shape`` "date") or a time of day ("time")."""
        found = self._shape_at.get(shape)
        if found is None:
            spans = date_spans(self.source) if shape == "date" else time_spans(self.source)
            found = self._shape_at[shape] = {a for a, _ in spans}
        return found

    def _shaped_start(self) -> npt.NDArray[np.int32] | None:
        """At the empty value of a date or time parameter: the tokens that begin the dates (times)
        the text writes, the quote joined to them included; None where it writes none."""
        tr = self.tracker
        key = tr.value_key()
        shape = self.shapes.get(tr.tool or "", {}).get(key or "")
        if (
            shape is None
            or key is None
            or not (self._before_string() or (tr.string is not None and not tr.string))
        ):
            return None
        # A span another parameter ran through (a title that took the whole sentence) is still free
        # for the date or time in it; one a parameter of the same shape took is not.
        alike = {k for k, v in self.shapes.get(tr.tool or "", {}).items() if v == shape}
        starts = self._shape_starts(shape) - self.ledger.blocked(tr.calls - 1, key, alike)
        if not starts:
            return None
        if tr.string is None:
            return self.index.opening(starts.__contains__)
        return self.index.starting_at(starts)

    def _option(self) -> npt.NDArray[np.int32] | None:
        """Within an ``enum`` string: the tokens toward the option the latest calls named
        (:meth:`LatestRound.option_tokens`); None elsewhere."""
        tr = self.tracker
        key = tr.value_key()
        spec = self.schemas.get(tr.tool or "", {}).get(key or "") if self.latest is not None else None
        options = spec.get("enum") if isinstance(spec, Mapping) else None
        if self.latest is None or not isinstance(options, list) or tr.escaped:
            return None
        quote = tr.string is None
        if quote and not self._before_string():
            return None
        texts = [o for o in options if isinstance(o, str)]
        ids = self.latest.option_tokens(self.vocab, texts, bytes(tr.string or b""), quote)
        return np.asarray(sorted(ids), dtype=np.int32) if ids else None

    def _reserved(self, tool: str, key: str) -> set[int]:
        """The starts of the dates and times this tool's date and time parameters take: not where
        another of its strings begins (a title is not "2025-03-14")."""
        shapes = self.shapes.get(tool, {})
        if key in shapes:
            return set()
        return set().union(*(self._shape_starts(shape) for shape in set(shapes.values())))

    def _before_string(self) -> bool:
        """At a value that is to be a string and has not opened yet (its quote may come merged with
        its first bytes, or with ``}``: ``"17``, ``"}``)."""
        tr = self.tracker
        if tr.string is not None or tr.number is not None or not tr.stack or tr.stack[-1].expect != "value":
            return False
        schema = self.schemas.get(tr.tool or "", {}).get(tr.value_key() or "")
        if len(tr.stack) == 2 and tr.stack[-1].kind == "arr" and isinstance(schema, Mapping):
            schema = schema.get("items")
        elif len(tr.stack) != 1:
            return False
        return isinstance(schema, Mapping) and "string" in schema_types(schema)

    def _at_value(self) -> bool:
        """Right before a member's value, at the top level of the arguments."""
        tr = self.tracker
        return (
            tr.string is None and tr.number is None and len(tr.stack) == 1 and tr.stack[0].expect == "value"
        )

    def _suited(self, key: str) -> list[tuple[int, int, bytes]]:
        """The conversation's numbers as this parameter reads them (:func:`readings_for`); for an
        identifier, the ones labelled as such (:func:`labelled_ids`) where there are any."""
        tool = self.tracker.tool or ""
        found = self._readings.get((tool, key))
        if found is None:
            schema = self.schemas.get(tool, {}).get(key)
            schema = schema if isinstance(schema, Mapping) else {}
            if "array" in schema_types(schema) and isinstance(schema.get("items"), Mapping):
                schema = schema["items"]
            types = schema_types(schema)
            said = f"{key} {schema.get('description', '')}"
            integer = "integer" in types and "number" not in types
            found = readings_for(self.index.text, self.index.number_spans, integer=integer, description=said)
            # An id is a number the conversation labels as one ("Created event with id 2"), not the
            # year of a date beside it: labelled ones, where there are any, are the only preferred.
            words = identifier_words(key)
            labelled = labelled_ids(self.index.text, found, words) if words is not None else []
            if len(labelled) > 1:  # several records: the one the request describes
                labelled = closest_records(self.index.text, labelled, self.request)
            if words is None:  # a number the text labels with the parameter's name ("TOTAL 9875"), or
                # one that counts what a count parameter counts ("two adults" for number_of_adults)
                labelled = labelled_by(self.index.text, found, (), name_words(key))
                if (nouns := counted_nouns(key)) is not None:
                    labelled += [s for s in counted_by(self.index.text, found, nouns) if s not in labelled]
            found = labelled or found
            if self.latest is not None:  # in a loop: the latest round's number, not an earlier round's
                found = self.latest.fresh(found)
            self._readings[(tool, key)] = found
        return found

    def _numbers(self, so_far: bytes, call: int, key: str, cut: bool) -> npt.NDArray[np.int32] | None:
        """Tokens that continue ``so_far`` toward a free number of the conversation, or end it there
        (unless ``cut``: :meth:`_cut_short`)."""
        spans = [(a, b, n) for a, b, n in self._suited(key) if self.ledger.free(a, b, call, key)]
        free = {n for _, _, n in spans}
        # "$10,000" copied digit by digit reaches "10" then a comma, which JSON reads as the end.
        grouped = any(self.index.text[a:b].startswith(so_far + b",") for a, b, _ in spans)
        ids: set[int] = set()
        for number in free:
            if number.startswith(so_far) and len(number) > len(so_far):
                rest = number[len(so_far) :]
                for k in range(1, len(rest) + 1):
                    ids.update(self.vocab.ids_for(rest[:k]))
        out = np.asarray(sorted(ids), dtype=np.int32)
        # A number the model chose is ended where the conversation ends it, in any reading it has,
        # except the digits of a scaled one (_cut_short) and the head of a grouped one.
        if so_far and (so_far in free or so_far in self.index.numbers) and not grouped and not cut:
            out = np.union1d(out, self.vocab.json_ends())
        return out if out.size else None
