"""The machinery under the schema's documents: typed fields over a JSON object, and the object back.

A document (kvtui.io.snapshot.schema) is a frozen dataclass whose fields are declared with
`field(doc, kind)`: the JSON key, what the value must be, and what it means (the field docs
docs/SNAPSHOT.md is generated from). Reading is forgiving the way a reader of older, newer or
imported snapshots must be, and writing gives back exactly what was read:

- a key the schema does not know is kept, in its place (`extras`), and written back;
- a known key whose value is not what the schema expects (a string where a number goes) reads
  as None and its value is kept as it was, so it is written back unchanged too;
- the keys' order is kept (`key_order`): `from_dict(d).to_dict() == d`, key for key, so a
  snapshot written by any version replays and exports byte-identically.

Values are copied on the way in and out: a document from `from_dict` never shares a list or
dict with the caller, so no one can change it behind its back. `view` reads without copying
(a view shares the dict's containers), for the typed reads of the views (report/, tui/), which
render a document many times a second and never keep it.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
from typing import Any, Callable, ClassVar, Mapping, TypeVar, cast

from kvtui.errors import UsageError

D = TypeVar("D", bound="Document")


class SchemaError(UsageError):
    """Not a document of the kind asked for (a step that is not a JSON object)."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """What a field's JSON value must be: `name` for the docs, `read` (JSON → typed, or raise
    ValueError: the value is then kept as it was), `write` (typed → JSON)."""

    name: str
    read: Callable[[Any], Any]
    write: Callable[[Any], Any]


# True while `Document.view` reads: values are shared with the dict read, not copied.
_SHARING: contextvars.ContextVar[bool] = contextvars.ContextVar("kvtui_snapshot_sharing", default=False)


def _copied(x: Any) -> Any:
    return x if _SHARING.get() else copy.deepcopy(x)


def _same(x: Any) -> Any:
    return copy.deepcopy(x)


def _check(name: str, ok: Callable[[Any], bool]) -> Kind:
    def read(v: Any) -> Any:
        if v is None or ok(v):
            return _copied(v)
        raise ValueError(name)

    return Kind(name, read, _same)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


NUMBER = _check("number", _is_num)  # int or float as written (128 stays 128, 128.0 stays 128.0); "inf" is +∞
INT = _check("integer", lambda v: isinstance(v, int) and not isinstance(v, bool))
TEXT = _check("string", lambda v: isinstance(v, str))
BOOL = _check("boolean", lambda v: isinstance(v, bool))
OBJECT = _check("object", lambda v: isinstance(v, dict))
LIST = _check("list", lambda v: isinstance(v, list))
ANY = Kind("any", _copied, _same)


def one(cls: type[Document]) -> Kind:
    """A nested document."""
    def read(v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise ValueError(cls.__name__)
        return cls._read(v)

    return Kind(cls.__name__, read, lambda d: None if d is None else d.to_dict())


def many(cls: type[Document]) -> Kind:
    """A list of nested documents (kept as a tuple). A list with anything but objects in it is
    kept as it was, the field reading as None."""
    def read(v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise ValueError(f"list of {cls.__name__}")
        return tuple(cls._read(x) for x in v)

    return Kind(f"list of {cls.__name__}", read, lambda t: None if t is None else [d.to_dict() for d in t])


def by_name(cls: type[Document]) -> Kind:
    """A JSON object whose values are nested documents, by name (kept as a dict, the keys in their order).
    An object with anything but objects for values is kept as it was, the field reading as None."""
    def read(v: Any) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict) or not all(isinstance(x, dict) for x in v.values()):
            raise ValueError(f"{cls.__name__} by name")
        return {k: cls._read(x) for k, x in v.items()}

    return Kind(f"{cls.__name__} by name", read,
                lambda m: None if m is None else {k: d.to_dict() for k, d in m.items()})


def field(doc: str, kind: Kind = ANY, key: str | None = None) -> Any:
    """A document's field: `doc` says what it means, `kind` what its value is, `key` its JSON key
    when it differs from the attribute's name."""
    return dataclasses.field(default=None, metadata={"doc": doc, "kind": kind, "key": key})


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str  # the attribute
    key: str  # the JSON key
    kind: Kind
    doc: str


@dataclasses.dataclass(frozen=True)
class Document:
    """A JSON object of the snapshot, typed. Subclasses declare their fields with `field`."""

    # Keys the schema does not know, and known keys whose value it could not read: kept as they were.
    extras: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    # The keys in the order they were read (empty for a document built in code).
    key_order: tuple[str, ...] = dataclasses.field(default=(), repr=False)

    _specs: ClassVar[dict[type, dict[str, Spec]]] = {}

    @classmethod
    def fields(cls) -> dict[str, Spec]:
        """JSON key → the field's spec, in declaration order."""
        got = Document._specs.get(cls)
        if got is None:
            got = {}
            for f in dataclasses.fields(cls):
                if "kind" in f.metadata:
                    key = f.metadata["key"] or f.name
                    got[key] = Spec(f.name, key, f.metadata["kind"], f.metadata["doc"])
            Document._specs[cls] = got
        return got

    @classmethod
    def from_dict(cls: type[D], d: Mapping[str, Any]) -> D:
        return cls._read_as(d, sharing=False)

    @classmethod
    def _read_as(cls: type[D], d: Mapping[str, Any], sharing: bool) -> D:
        if not isinstance(d, Mapping):
            raise SchemaError(f"a {cls.__name__} is a JSON object, not {type(d).__name__}")
        token = _SHARING.set(sharing)  # nested documents read the same way (copied, or shared by a view)
        try:
            return cls._read(d)
        finally:
            _SHARING.reset(token)

    @classmethod
    def _read(cls: type[D], d: Mapping[str, Any]) -> D:
        specs = cls.fields()
        values: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        for k, v in d.items():
            s = specs.get(k)
            if s is not None:
                try:
                    values[s.name] = s.kind.read(v)
                    continue
                except ValueError:
                    pass  # not what the schema expects: kept as it was, the field reads None
            extras[k] = _copied(v)
        return cls(extras=extras, key_order=tuple(d), **values)

    @classmethod
    def view(cls: type[D], d: Mapping[str, Any]) -> D:
        """The document read without copying: it shares `d`'s lists and dicts. For a typed read of a
        document that no one changes while the view is used (a view renders, compares, reports);
        `from_dict` for one that is kept. Nested documents are views too."""
        return cls._read_as(d, sharing=True)

    @classmethod
    def of(cls: type[D], d: D | Mapping[str, Any]) -> D:
        """`d` typed: itself where it is one already, else a view of it (`view`). For the views'
        functions that take either a document or the dict a caller still holds."""
        if isinstance(d, cls):
            return d
        return cls.view(cast(Mapping[str, Any], d))

    def by_key(self, key: str) -> Any:
        """The field whose JSON key is `key`, as typed: for a key chosen at run time (a column of a
        table, a percentile by name). None where `key` is no field of this document, or the field
        is absent, null or of another type."""
        s = self.fields().get(key)
        return getattr(self, s.name) if s is not None else None

    def stored(self, key: str) -> Any:
        """The value under `key` as the file holds it: the field's, or the value kept as it was where
        it was not of the field's type (an older snapshot's `aborted: true`); None where absent. For
        an export that writes each key's value through, column by column (the CSV)."""
        if key in self.extras:
            return self.extras[key]
        return self.by_key(key)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the keys read, in their order, then fields set in code, then new extras."""
        specs = self.fields()
        out: dict[str, Any] = {}
        for k in self.key_order:
            out[k] = self._value(k, specs)
        for k, s in specs.items():
            if k not in out and getattr(self, s.name) is not None:
                out[k] = s.kind.write(getattr(self, s.name))
        for k, v in self.extras.items():
            if k not in out:
                out[k] = copy.deepcopy(v)
        return out

    def _value(self, k: str, specs: dict[str, Spec]) -> Any:
        if k in self.extras:
            return copy.deepcopy(self.extras[k])
        s = specs[k]
        return s.kind.write(getattr(self, s.name))

    def __bool__(self) -> bool:
        """Whether it holds any key: an empty document is falsy, as the empty JSON object it reads,
        so `mode.search or Search()` and `if mode.search:` read as they did over the dicts."""
        return bool(self.key_order) or bool(self.extras) or any(
            getattr(self, s.name) is not None for s in self.fields().values())

    def has(self, key: str) -> bool:
        """Whether the object has the key (a field read as None may be missing or null)."""
        return key in self.key_order or key in self.extras or (
            key in self.fields() and getattr(self, self.fields()[key].name) is not None)
