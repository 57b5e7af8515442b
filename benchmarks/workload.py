"""A deterministic, seeded simulation of an agent run: the state snapvc benchmarks commit.

An agent loop keeps one state dict and changes a little of it at every step: it appends
to the message history, rewrites a few scratchpad notes, now and then edits a document
from its library, and bumps its counters. Everything else stays exactly as it was — the
same Python objects — which is what lets a snapshot store skip unchanged parts.

``AgentRun`` reproduces that shape::

    run = AgentRun(seed=0)
    state = run.initial_state()
    for i in range(1, 501):
        state = run.step(state, i)   # mutates ``state`` in place and returns it

``run.step_rebuilt(state, i)`` makes the same changes the way LangGraph's reducers and
immutable-update loops do: it returns a new state of new containers that hold the same
element objects, and leaves ``state`` as it was.

The text is built by ``TextGenerator``, which needs no data files: a vocabulary of a few
thousand pseudo-words made of syllables, drawn with Zipf-like frequencies into
sentences with punctuation. It compresses like prose (zstd at level 3 shrinks a 20 KB
document about 2.6x, as it does English prose such as the GPL's text, 2.7x), not like
random bytes (1x) nor like a repeated string (100x+).

Same seed ⇒ same states, in every process and on every platform: all randomness comes
from ``random.Random`` instances seeded with integers, never from ``hash()`` or set
order, and step ``i`` draws from its own generator, so a step's changes do not depend
on how many steps ran before it.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from typing import Any

__all__ = ["AgentRun", "TextGenerator", "TOOLS", "library", "compressible_bytes"]

_ONSETS = (
    "b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
    "br", "ch", "cl", "cr", "dr", "fl", "gr", "pl", "pr", "sh", "sl", "st", "th", "tr", "", "",
)  # fmt: skip
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ai", "ea", "ou", "io", "y")
_CODAS = ("", "", "", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng", "ck", "x")
# Syllables per word: mostly one to three, as in most languages.
_SYLLABLE_COUNTS = (1, 2, 3, 4)
_SYLLABLE_WEIGHTS = (30, 40, 22, 8)

# Tools the simulated agent calls, each with the argument names it takes.
TOOLS: dict[str, tuple[str, ...]] = {
    "search": ("query", "limit", "site"),
    "read_file": ("path", "offset", "length"),
    "write_file": ("path", "mode"),
    "run_python": ("code", "timeout"),
    "browse": ("url", "selector"),
    "sql_query": ("database", "sql", "limit"),
    "calculator": ("expression", "precision"),
}
_INT_ARGS = frozenset({"limit", "offset", "length", "timeout", "precision"})


def _mix(*parts: int) -> int:
    """One integer seed from several, stable across processes (unlike ``hash``)."""
    seed = 0x9E3779B97F4A7C15
    for part in parts:
        seed = (seed * 1_000_003 + part + 0x632BE59BD9B4E019) % (1 << 64)
    return seed


class TextGenerator:
    """Word-like text from a seeded pseudo-vocabulary with Zipf-like word frequencies.

    Words are made of syllables drawn with Zipf-like frequencies too, so they share
    parts the way real words do; the frequent words are the short ones; and each word
    has a few favourite successors, so recurring word pairs appear as in real prose.
    """

    def __init__(
        self,
        seed: int = 0,
        vocabulary_size: int = 3000,
        *,
        syllables: int = 120,
        zipf_exponent: float = 1.1,
        successor_rate: float = 0.4,
    ) -> None:
        rng = random.Random(_mix(seed, 1))
        inventory: set[str] = set()
        while len(inventory) < syllables:
            inventory.add(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS))
        syllable_list = sorted(inventory)
        rng.shuffle(syllable_list)
        syllable_weights = list(itertools.accumulate(1.0 / rank for rank in range(1, syllables + 1)))
        words: set[str] = set()
        while len(words) < vocabulary_size:
            count = rng.choices(_SYLLABLE_COUNTS, _SYLLABLE_WEIGHTS)[0]
            words.add("".join(rng.choices(syllable_list, cum_weights=syllable_weights, k=count)))
        # Short words are the frequent ones, as in real prose; ties broken by the seed.
        # Drawn in sorted order: a set's order changes from one process to the next.
        jitter = {word: rng.random() * 6 for word in sorted(words)}
        ranked = sorted(jitter, key=lambda w: (len(w) + jitter[w], w))
        self.vocabulary: tuple[str, ...] = tuple(ranked)
        self._cumulative = list(
            itertools.accumulate(1.0 / (rank**zipf_exponent) for rank in range(1, vocabulary_size + 1))
        )
        common = min(200, vocabulary_size)
        self._successors = {word: tuple(ranked[rng.randrange(common)] for _ in range(3)) for word in ranked}
        self._successor_rate = successor_rate

    def words(self, rng: random.Random, count: int) -> list[str]:
        """``count`` words drawn by frequency, now and then a favourite successor of the previous one."""
        drawn = rng.choices(self.vocabulary, cum_weights=self._cumulative, k=count)
        rate = self._successor_rate
        for i in range(1, count):
            if rng.random() < rate:
                drawn[i] = rng.choice(self._successors[drawn[i - 1]])
        return drawn

    def sentence(self, rng: random.Random) -> str:
        """A sentence of 4 to 22 words with a capital, commas and an end mark."""
        words = self.words(rng, rng.randint(4, 22))
        for i in range(1, len(words) - 1):
            if rng.random() < 0.07:
                words[i] += ","
        words[0] = words[0].capitalize()
        end = rng.choices((".", "?", "!", ":"), (85, 7, 4, 4))[0]
        return " ".join(words) + end

    def text(self, rng: random.Random, length: int) -> str:
        """Prose of exactly ``length`` characters: sentences, in paragraphs of 3 to 8."""
        parts: list[str] = []
        size = 0
        in_paragraph = 0
        paragraph_size = rng.randint(3, 8)
        while size < length:
            if parts:
                separator = "\n\n" if in_paragraph >= paragraph_size else " "
                if separator == "\n\n":
                    in_paragraph = 0
                    paragraph_size = rng.randint(3, 8)
                parts.append(separator)
                size += len(separator)
            sentence = self.sentence(rng)
            parts.append(sentence)
            size += len(sentence)
            in_paragraph += 1
        return "".join(parts)[:length]

    def phrase(self, rng: random.Random, low: int, high: int) -> str:
        """A short note of ``low`` to ``high`` characters, ending on a whole word when it can."""
        length = rng.randint(low, high)
        text = self.sentence(rng)
        while len(text) < length:
            text += " " + self.sentence(rng)
        cut = text.rfind(" ", low, length + 1)
        return text[:cut] if cut >= low else text[:length]


class AgentRun:
    """A simulated agent: an initial state and the in-place changes of each step.

    The state is ``{"messages", "scratchpad", "documents", "counters", "task"}``. Step
    ``i`` (counted from 1):

    - appends two new message dicts: an assistant message with one tool call
      (``"call_<i>"``, 100-1500 characters of content) and the tool's result (50-800);
    - replaces the values of 3 scratchpad keys with new strings (20-60 characters);
    - every 10th step, replaces one document by a copy in which 300 characters at a
      random offset in its middle half are replaced by 300 new ones (same length);
    - updates the counters in place.

    ``step`` makes these changes in place; ``step_rebuilt`` makes them in new containers.

    Every other value is left untouched: the same object as before the step.
    """

    def __init__(self, seed: int = 0, documents: int = 50, doc_size: int = 20_000, scratch_keys: int = 25) -> None:
        if documents < 1 or scratch_keys < 3 or doc_size < 1200:
            raise ValueError("need at least 1 document, 3 scratchpad keys and documents of 1200+ characters")
        self.seed = seed
        self.documents = documents
        self.doc_size = doc_size
        self.scratch_keys = scratch_keys
        self.text = TextGenerator(seed)

    def _rng(self, *parts: int) -> random.Random:
        return random.Random(_mix(self.seed, *parts))

    def initial_state(self) -> dict[str, Any]:
        """A fresh state: empty history, a filled scratchpad and document library, zero counters."""
        rng = self._rng(2)
        text = self.text
        return {
            "messages": [],
            "scratchpad": {f"note-{k:02d}": text.phrase(rng, 20, 60) for k in range(self.scratch_keys)},
            "documents": {f"doc-{k:02d}": text.text(rng, self.doc_size) for k in range(self.documents)},
            "counters": {"step": 0, "tool_calls": 0, "tokens_in": 0, "tokens_out": 0},
            "task": {"id": f"task-{rng.getrandbits(48):012x}", "goal": text.phrase(rng, 60, 160)},
        }

    def step(self, state: dict[str, Any], i: int) -> dict[str, Any]:
        """Apply step ``i`` to ``state`` in place and return it."""
        change = self._change(state, i)
        state["messages"].extend(change.messages)
        state["scratchpad"].update(change.notes)
        state["documents"].update(change.documents)
        state["counters"].update(change.counters)
        return state

    def step_rebuilt(self, state: dict[str, Any], i: int) -> dict[str, Any]:
        """Step ``i`` as an immutable-update loop or a LangGraph reducer makes it: a new
        state, ``state`` left as it was.

        The changes are ``step``'s (same seed, same ``i`` => equal states), but each step
        builds new containers holding the same element objects as before:
        ``{**state, "messages": messages + [two new], ...}``, a copy of the scratchpad with
        three notes replaced, a copy of the library (with one document replaced every 10th
        step), and new counters. The task and every old message, note and document are the
        very objects ``state`` held.
        """
        change = self._change(state, i)
        new = {**state, "messages": state["messages"] + change.messages}
        scratchpad = dict(state["scratchpad"])
        scratchpad.update(change.notes)
        new["scratchpad"] = scratchpad
        documents = dict(state["documents"])
        documents.update(change.documents)
        new["documents"] = documents
        new["counters"] = {**state["counters"], **change.counters}
        return new

    def _change(self, state: dict[str, Any], i: int) -> _Change:
        """What step ``i`` changes in ``state``, drawn from step ``i``'s own generator
        (``state`` is only read: the keys of its scratchpad and library, the edited document)."""
        rng = self._rng(3, i)
        text = self.text
        tool = rng.choice(sorted(TOOLS))
        arguments: dict[str, Any] = {}
        for name in rng.sample(TOOLS[tool], min(len(TOOLS[tool]), rng.randint(2, 3))):
            arguments[name] = rng.randint(1, 5000) if name in _INT_ARGS else text.phrase(rng, 8, 40)
        said = text.text(rng, rng.randint(100, 1500))
        result = text.text(rng, rng.randint(50, 800))
        call_id = f"call_{i}"
        call = {"id": call_id, "name": tool, "arguments": arguments}
        messages = [
            {"role": "assistant", "content": said, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": result},
        ]
        notes = {key: text.phrase(rng, 20, 60) for key in rng.sample(sorted(state["scratchpad"]), 3)}

        documents = {}
        if i % 10 == 0:
            key = rng.choice(sorted(state["documents"]))
            old = state["documents"][key]
            splice = min(300, len(old) // 4)
            offset = rng.randint(len(old) // 4, (3 * len(old)) // 4 - splice)
            documents[key] = old[:offset] + text.text(rng, splice) + old[offset + splice :]

        counters = state["counters"]
        return _Change(messages, notes, documents, {
            "step": i,
            "tool_calls": counters["tool_calls"] + 1,
            "tokens_in": counters["tokens_in"] + len(result) // 4,
            "tokens_out": counters["tokens_out"] + len(said) // 4,
        })  # fmt: skip


@dataclass
class _Change:
    """One step's changes: the two new messages, the new values of notes, documents and counters."""

    messages: list[dict[str, Any]]
    notes: dict[str, str]
    documents: dict[str, str]
    counters: dict[str, int]


def library(seed: int, count: int, length: int, *, pool: int = 50_000) -> dict[str, str]:
    """``count`` documents of exactly ``length`` characters, ``doc-0000`` onwards.

    For hundreds of megabytes, where ``TextGenerator.text`` would take a minute: each
    document is sentences drawn at random from a pool of ``pool`` sentences that
    ``TextGenerator`` wrote, in paragraphs. No two documents share a run of sentences
    long enough to be stored once for both, and each compresses like prose.
    """
    text = TextGenerator(seed)
    rng = random.Random(_mix(seed, 4))
    sentences = [text.sentence(rng) for _ in range(pool)]
    mean = sum(map(len, sentences)) / pool + 1
    docs = {}
    for k in range(count):
        parts: list[str] = []
        size = 0
        while size < length:
            batch = rng.choices(sentences, k=int((length - size) / mean) + 8)
            paragraph = rng.randint(3, 8)
            for i in range(0, len(batch), paragraph):
                chunk = " ".join(batch[i : i + paragraph]) + "\n\n"
                parts.append(chunk)
                size += len(chunk)
        docs[f"doc-{k:04d}"] = "".join(parts)[:length]
    return docs


def compressible_bytes(seed: int, n: int) -> bytes:
    """``n`` random bytes drawn from 16 values: zstd at level 3 shrinks them about 1.9x,
    with no repeats for deduplication to find."""
    rng = random.Random(_mix(seed, 5))
    alphabet = bytes(range(0x41, 0x51))
    return rng.randbytes(n).translate(bytes(alphabet[b % 16] for b in range(256)))
