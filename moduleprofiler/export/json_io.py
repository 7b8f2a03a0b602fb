"""A profile as schema-versioned JSON, and back.

The document is :func:`~moduleprofiler.export.frame.profile_to_dict` (``schema_version``,
``totals``, ``columns``, ``records``, ``modules``, ...) plus what a :class:`Profile` needs to
be rebuilt (every other :class:`Profile` field: ``unsupported_ops``, ``outside_ops``, the
backward results, a timing pass's ``facts``). Each record's ``metrics`` holds the columns
listeners wrote for that call;
``columns`` says how the ones this package does not define are shown and combined, and
reading the document registers those that are not registered yet, so a saved profile renders
the same in another process. A record's, a module's and a peak call's fields are named as
the frames' columns (``call``, ``module``, ``type``:
:data:`~moduleprofiler.export.keys.FIELD_KEYS`), their module paths PyTorch's (the root is
``""``). Version 1 documents (no ``columns``, ``metrics`` null) are read too, and documents
of versions 1 and 2 (own counts as ``ops``, inclusive ones as ``inclusive_ops``), 3 (own
``launches``, ``collectives``, ``roofline_ms``... without inclusive twins) and 4 (``index``,
``path``, ``type_name``) under the names of version 5 with the same numbers
(:mod:`moduleprofiler.export.renamed`).

The values of the record and module fields (shape trees above all) keep their Python
structure:
tuples are JSON arrays, lists ``{"__list__": [...]}``, dicts JSON objects (or
``{"__dict__": [[key, value], ...]}`` for keys that are not strings), non-finite floats
``{"__float__": "nan"}`` (NaN reads back as ``math.nan`` itself: containers compare NaN by
identity, so a result holding ``math.nan`` reads back equal); anything else is stored as
``{"__repr__": "..."}`` and read back as that string.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import numbers
import os
import types
import typing
from collections.abc import Mapping, Sequence
from typing import IO, Any, TypeVar

from moduleprofiler._version import __version__
from moduleprofiler.export.columns import AGGREGATIONS, KINDS, declare_document_column
from moduleprofiler.export.frame import SCHEMA_VERSION, keyed_fields, profile_to_dict
from moduleprofiler.export.io import PathLike
from moduleprofiler.export.keys import FIELD_KEYS
from moduleprofiler.export.renamed import upgraded_names
from moduleprofiler.facts import TimingFacts
from moduleprofiler.records import CallRecord, ModuleInfo, ProfileData, ancestor_paths
from moduleprofiler.warn import warn

P = TypeVar("P", bound=ProfileData)

DOCUMENT = "moduleprofiler.profile"
_ATTRIBUTES = {key: attribute for attribute, key in FIELD_KEYS.items()}
"""Key -> attribute, for the fields :data:`FIELD_KEYS` names otherwise in documents."""
_TAGS = ("__list__", "__dict__", "__float__", "__repr__")
_TABLES = ("records", "modules")
"""Top-level lists of dataclass rows; each field value is encoded with :func:`encode`."""

RESULT_CLASSES: dict[str, type[ProfileData]] = {}
"""Every result class (a subclass of ``Profile``: a prediction, a memory report, a timing) by
its qualified name, the ``result`` a document names so that it reads back as what it was."""


def register_result(cls: type[ProfileData]) -> None:
    """Make ``cls`` a result kind documents can name (``Profile`` subclasses do it on their
    own)."""
    RESULT_CLASSES[_qualified(cls)] = cls


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def encode(value: Any) -> Any:
    """``value`` as JSON-native data (see the module docstring)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else {"__float__": repr(number)}
    if isinstance(value, tuple):
        return [encode(item) for item in value]
    if isinstance(value, list):
        return {"__list__": [encode(item) for item in value]}
    if isinstance(value, Mapping):
        plain = all(isinstance(key, str) for key in value) and not (
            len(value) == 1 and next(iter(value)) in _TAGS)
        if plain:
            return {key: encode(item) for key, item in value.items()}
        return {"__dict__": [[encode(key), encode(item)] for key, item in value.items()]}
    return {"__repr__": repr(value)}


def decode(value: Any) -> Any:
    """The inverse of :func:`encode` (arrays become tuples)."""
    if isinstance(value, list):
        return tuple(decode(item) for item in value)
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, inner), = value.items()
            if tag == "__list__":
                return [decode(item) for item in inner]
            if tag == "__dict__":
                return {_hashable(decode(key)): decode(item) for key, item in inner}
            if tag == "__float__":  # NaN as math.nan itself (see the module docstring)
                number = float(inner)
                return math.nan if math.isnan(number) else number
            if tag == "__repr__":
                return inner
        return {key: decode(item) for key, item in value.items()}
    return value


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key


_PROFILE_FIELDS = tuple(
    field.name for field in dataclasses.fields(ProfileData)
    if field.init and field.name not in ("records", "modules", "excluded", "total_params",
                                         "total_buffers", "_by_path")
)
"""Profile fields stored at the top level of the document, beside its tables and totals."""


def profile_document(profile: ProfileData) -> dict[str, Any]:
    """The JSON document of ``profile`` as Python data (already JSON-native)."""
    document: dict[str, Any] = {"document": DOCUMENT, "moduleprofiler_version": __version__}
    document.update(profile_to_dict(profile))
    for name in _PROFILE_FIELDS:  # unsupported_ops, outside_ops, backward results, ...
        value = getattr(profile, name)
        if isinstance(value, TimingFacts):  # its shape tree keeps its lists, as a record's
            value = {**value.to_dict(), "input_shapes": encode(value.input_shapes)}
        document[name] = dict(value) if isinstance(value, Mapping) else value
    for key in _TABLES:
        document[key] = [{name: encode(value) for name, value in row.items()}
                         for row in document[key]]
    if _qualified(type(profile)) in RESULT_CLASSES:
        # the result's kind and its own figures (a prediction's latency, a memory report's
        # peaks) as nested plain data, read back by the fields' types
        document["result"] = _qualified(type(profile))
        document["result_fields"] = result_values(profile)
    return {key: value if key in _TABLES else _native(value) for key, value in document.items()}


def result_values(profile: ProfileData) -> dict[str, Any]:
    """The figures a result class adds to its profile (a prediction's latency and band, a
    memory report's peaks) as plain data (:func:`plain_data`); empty for a plain profile."""
    return {field.name: plain_data(getattr(profile, field.name))
            for field in _result_fields(type(profile))}


def _result_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The init fields ``cls`` adds to :class:`ProfileData`'s."""
    base = {field.name for field in dataclasses.fields(ProfileData)}
    return [field for field in dataclasses.fields(cls)
            if field.init and field.name not in base]


def plain_data(value: Any) -> Any:
    """``value`` with every dataclass in it (at any depth) as a dict of its fields, as
    ``dataclasses.asdict`` makes it, except that a class declaring ``FIELD_KEYS`` (attribute
    -> key, :data:`~moduleprofiler.export.keys.FIELD_KEYS`: a peak call's ``path`` is
    ``module``, as in the frames) has its fields under those keys, the old ones still read
    with a ``DeprecationWarning``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        row = {field.name: plain_data(getattr(value, field.name))
               for field in dataclasses.fields(value)}
        if getattr(type(value), "FIELD_KEYS", None):
            return keyed_fields(row, f"the {type(value).__name__} dict")
        return row
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple, as asdict
        return type(value)(*(plain_data(item) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(plain_data(item) for item in value)
    if isinstance(value, dict):
        return {key: plain_data(item) for key, item in value.items()}
    return value


def _native(value: Any) -> Any:
    """Document structure (lists, string-keyed dicts, numbers) as JSON-native data."""
    if isinstance(value, (list, tuple)):
        return [_native(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _native(item) for key, item in value.items()}
    return encode(value)


def json_text(profile: ProfileData, *, indent: int | None = 2) -> str:
    """``profile`` as JSON text: one record or module per line (``indent`` spaces), or all on
    one line (``indent=None``)."""
    document = profile_document(profile)
    if indent is None:
        return _dumps(document) + "\n"
    pad = " " * indent
    lines = []
    for key, value in document.items():
        if key in _TABLES and value:
            rows = f",\n{pad * 2}".join(_dumps(row) for row in value)
            lines.append(f"{pad}{_dumps(key)}: [\n{pad * 2}{rows}\n{pad}]")
        else:
            lines.append(f"{pad}{_dumps(key)}: {_dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, ensure_ascii=False)


def _build(cls: type[Any], data: Mapping[str, Any], what: str) -> Any:
    """A record or module of class ``cls`` from its row ``data`` (keys as
    :data:`FIELD_KEYS` names them)."""
    fields = {field.name: field for field in dataclasses.fields(cls) if field.init}
    values = {_ATTRIBUTES.get(key, key): decode(value) for key, value in data.items()
              if _ATTRIBUTES.get(key, key) in fields}
    if "metrics" in fields and values.get("metrics") is None:
        values["metrics"] = {}  # version 1 wrote null
    missing = [FIELD_KEYS.get(name, name) for name, field in fields.items()
               if name not in values and field.default is dataclasses.MISSING
               and field.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"profile JSON: a {what} lacks {missing}")
    return cls(**values)


def profile_from_document(document: Mapping[str, Any], factory: type[P]) -> P:
    """Rebuild a profile (of class ``factory``) from :func:`profile_document` data."""
    if not isinstance(document, Mapping) or document.get("document") != DOCUMENT:
        raise ValueError(f"not a moduleprofiler profile (expected \"document\": \"{DOCUMENT}\")")
    version = document.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(f"profile JSON has schema_version {version!r}; this moduleprofiler "
                         f"({__version__}) reads versions up to {SCHEMA_VERSION}")
    if version < SCHEMA_VERSION:
        document = _upgraded(document, version)
    _declare(document.get("columns") or {})
    cls = _result_class(document, factory)
    totals = document.get("totals", {})
    records = tuple(_build(CallRecord, r, "record") for r in document["records"])
    return cls(
        records=records,
        modules=_modules(document["modules"], {record.path for record in records}),
        excluded=tuple(document.get("excluded", ())),
        total_params=totals.get("params", 0),
        total_buffers=totals.get("buffers", 0),
        **{name: _field_value(document[name], name) for name in _PROFILE_FIELDS
           if name in document},
        **_result_values(cls, document.get("result_fields") or {}),
    )


def _result_class(document: Mapping[str, Any], factory: type[P]) -> type[P]:
    """The class the document was written from where it is ``factory`` or a subclass of it
    (``Profile.from_json`` of a saved prediction is a prediction again), else ``factory``."""
    name = document.get("result")
    if not isinstance(name, str):
        return factory
    if name not in RESULT_CLASSES and name.startswith("moduleprofiler."):
        try:  # a result class of this package whose module is not imported yet
            importlib.import_module(name.rsplit(".", 1)[0])
        except ImportError:
            pass
    cls = RESULT_CLASSES.get(name)
    if cls is None:
        warn(f"profile JSON: written as {name}, which this process does not define; read "
             f"as {factory.__name__} without that result's own fields")
        return factory
    return cls if issubclass(cls, factory) else factory


def _result_values(cls: type, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the fields ``cls`` adds to a profile, rebuilt by their types."""
    fields = _result_fields(cls)
    if not fields:
        return {}
    hints = _type_hints(cls)
    missing = [field.name for field in fields if field.name not in raw
               and field.default is dataclasses.MISSING
               and field.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"profile JSON: not a {cls.__name__} (it lacks {missing}); read it "
                         "with Profile.from_json")
    return {field.name: _typed(hints.get(field.name), raw[field.name])
            for field in fields if field.name in raw}


def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError):  # an annotation only a type checker can resolve
        return {}


def _typed(hint: Any, value: Any) -> Any:
    """``value`` (plain JSON data) as the type ``hint`` says: nested dataclasses rebuilt,
    arrays as tuples, tagged values decoded."""
    if value is None:
        return None
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        classes = [arg for arg in typing.get_args(hint) if dataclasses.is_dataclass(arg)]
        hint = classes[0] if len(classes) == 1 else None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        hints = _type_hints(hint)
        keys: Mapping[str, str] = getattr(hint, "FIELD_KEYS", None) or {}
        values = {}
        for field in dataclasses.fields(hint):
            # a field FIELD_KEYS renames is under its attribute name in a document of schema
            # version 4 or less (a memory pass's peak call: path, index, type_name)
            key = next((name for name in (keys.get(field.name), field.name)
                        if name is not None and name in value), None)
            if field.init and key is not None:
                values[field.name] = _typed(hints.get(field.name), value[key])
        return hint(**values)
    return decode(value)


def _upgraded(document: Mapping[str, Any], version: int) -> dict[str, Any]:
    """A document of schema ``version`` 1 to 4 with its fields and columns named as in
    version 5 (own ``ops`` -> ``self_ops``, ``inclusive_ops`` -> ``ops``, ``own_params`` ->
    ``self_params``; own ``launches`` -> ``self_launches``, ...; a record's and a module's
    ``index``, ``path``, ``type_name`` -> ``call``, ``module``, ``type``); the numbers stay.
    Its totals are the model's and keep their names. A result's own figures (a memory pass's
    peak call) are read by their fields' types, under either name (:func:`_typed`)."""
    def renamed(mapping: Mapping[str, Any]) -> dict[str, Any]:
        return upgraded_names(mapping, version) if version < 4 else dict(mapping)

    def row_of(fields: Mapping[str, Any]) -> dict[str, Any]:
        return {FIELD_KEYS.get(key, key): value for key, value in renamed(fields).items()}

    def record(row: Mapping[str, Any]) -> dict[str, Any]:
        out = row_of(row)
        if isinstance(out.get("metrics"), Mapping):
            out["metrics"] = renamed(out["metrics"])
        return out

    upgraded = dict(document)
    upgraded["records"] = [record(row) for row in document["records"]]
    upgraded["modules"] = [row_of(row) for row in document["modules"]]
    if isinstance(document.get("columns"), Mapping):
        upgraded["columns"] = renamed(document["columns"])
    if isinstance(document.get("module_metrics"), Mapping):
        upgraded["module_metrics"] = {path: renamed(values) if isinstance(
            values, Mapping) else values for path, values in document["module_metrics"].items()}
    return upgraded


def _modules(rows: Sequence[Mapping[str, Any]], called: set[str]) -> tuple[ModuleInfo, ...]:
    """The modules of a document. One written before modules said whether they are
    containers (``container``) says it the way its writer's statuses did: a module never
    called with a called descendant was a grouping."""
    holding = {above for path in called for above in ancestor_paths(path)}
    return tuple(_build(ModuleInfo, row if "container" in row else {
        **row, "container": row.get("module") not in called and row.get("module") in holding},
        "module") for row in rows)


def _field_value(value: Any, name: str = "") -> Any:
    if name == "facts" and isinstance(value, dict):
        return TimingFacts.from_dict(decode(value))
    # JSON has no tuples: tuple-valued profile fields come back as lists
    if isinstance(value, list):
        return tuple(value)
    return {key: decode(item) for key, item in value.items()} if isinstance(value, dict) \
        else decode(value)


def _declare(columns: Mapping[str, Any]) -> None:
    """Register the document's own columns that this process does not know yet (a column
    registered here wins: the reader may know better)."""
    for name, spec in columns.items():
        if not isinstance(spec, Mapping):
            continue
        kind, aggregation = spec.get("kind"), spec.get("aggregation")
        if kind not in KINDS or aggregation not in AGGREGATIONS:
            continue
        try:
            declare_document_column(name, kind, spec.get("label"), aggregation=aggregation,
                                    unit=str(spec.get("unit", "")),
                                    additive=bool(spec.get("additive", True)))
        except ValueError:
            continue  # not a name this version accepts: shown by its name's default


def profile_from_json(source: str | PathLike | IO[str], factory: type[P]) -> P:
    """Read a profile (of class ``factory``) from a path, a text file object, or the JSON text
    itself (a string starting with ``{``)."""
    return profile_from_document(json.loads(read_json_text(source)), factory)


def read_json_text(source: str | PathLike | IO[str]) -> str:
    """The JSON text of ``source``: a path, a text file object, or the text itself (a string
    starting with ``{``)."""
    if isinstance(source, str) and source.lstrip().startswith("{"):
        return source
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as handle:
            return handle.read()
    if callable(getattr(source, "read", None)):
        return str(source.read())
    raise TypeError(f"source must be a path, a text file object or JSON text, got "
                    f"{type(source).__name__} {source!r:.40}")
