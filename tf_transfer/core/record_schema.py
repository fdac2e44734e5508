"""The shape of a JSON record file (a run's `summary.json`): `Field` says what one key holds, `Schema` checks a record
against its fields and reads an older record with the values its missing keys stand for.

A field is one key: the JSON types of its value, a one-line meaning, whether every record has it from its first
write (`required`) or once its run completed (`at_end`), and `older`: what a record written before the key existed
is read as (`NO_DEFAULT`: every record that can hold the key has it). `item` is the schema of each element of a list
value (a run's epochs); `keys` that of a dict value whose own keys came over time (LoRA's `init`); `per_epoch` marks
a key that a training method adds to each epoch's record rather than to the run's.

`tf_transfer.training.run_record` holds the fields of each kind of run; this module knows no study.

Example:

>>> from tf_transfer.core.record_schema import Field, Schema
>>> schema = Schema("toy", (Field("loss", (float,), "the loss"), Field("method", (str,), "what trained",
...                                                                   required=False, older="freeze")))
>>> schema.problems({"loss": "low"})
["'loss' is a str, not float"]
>>> schema.read({"loss": 0.5})
{'loss': 0.5, 'method': 'freeze'}
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Optional


class _NoDefault:
    def __repr__(self):
        return "NO_DEFAULT"


NO_DEFAULT = _NoDefault()  # `Field.older` of a key every record has

# JSON's types, by the Python type `json.load` gives; `float` also takes an int (JSON writes 2.0 as 2.0, but a value
# computed as an int, a count of seconds, may be one).
_NAMES = {str: "str", int: "int", float: "float", bool: "bool", list: "list", dict: "dict", type(None): "null"}


@dataclasses.dataclass(frozen=True)
class Field:
    """One key of a record (see the module's docstring)."""

    name: str
    types: tuple
    meaning: str
    required: bool = True
    at_end: bool = False
    older: Any = NO_DEFAULT
    item: Optional["Schema"] = None
    keys: Optional["Schema"] = None
    per_epoch: bool = False  # a key of each epoch's record rather than of the run's (a training method's)

    def type_text(self) -> str:
        return " or ".join(_NAMES[t] for t in self.types)

    def accepts(self, value) -> bool:
        kind = type(value)
        if kind is bool:
            return bool in self.types
        return kind in self.types or (kind is int and float in self.types)


class RecordMismatch(TypeError):
    """A record that does not match its schema as it is written: a key no field declares, a required key missing, a
    value of another type. The code that writes it is wrong (declare the key in its schema, or mend the value)."""


class Schema:
    """The fields of one kind of record, in the order a record lists them."""

    def __init__(self, kind: str, fields: tuple):
        self.kind = kind
        self.fields = {field.name: field for field in fields}
        if len(self.fields) != len(fields):
            twice = sorted({f.name for f in fields if sum(g.name == f.name for g in fields) > 1})
            raise ValueError(f"the {kind} record declares {', '.join(twice)} twice")

    def problems(self, record: dict, completed: Optional[bool] = None, where: str = "", older: bool = False) -> list:
        """What does not match: undeclared keys, missing required keys (and `at_end` ones once `completed`, by
        default the record's own `completed`), values of other types; [] when it matches. `older`: the record
        may have been started before some keys existed (a resumed run), so a key with an `older` value may be
        missing."""
        completed = record.get("completed") if completed is None else completed
        found = [f"'{where}{key}' is not a key of the {self.kind} record" for key in record if key not in self.fields]
        for name, field in self.fields.items():
            if name not in record:
                if (field.required or (field.at_end and completed)) and not (older and field.older is not NO_DEFAULT):
                    found.append(f"'{where}{name}' is missing")
                continue
            value = record[name]
            if not field.accepts(value):
                found.append(f"'{where}{name}' is a {_NAMES.get(type(value), type(value).__name__)}, not "
                             f"{field.type_text()}")
            elif field.item is not None and isinstance(value, list):
                for i, element in enumerate(value):
                    found += field.item.problems(element, False, f"{where}{name}[{i}].", older) if isinstance(
                        element, dict) else [f"'{where}{name}[{i}]' is not an object"]
            elif field.keys is not None and isinstance(value, dict):
                found += field.keys.problems(value, False, f"{where}{name}.", older)
        return found

    def check(self, record: dict, what: str, older: bool = False) -> None:
        """Raises `RecordMismatch` naming every problem of `record` (`what`: the file, for the message; `older` as
        for `problems`)."""
        found = self.problems(record, older=older)
        if found:
            raise RecordMismatch(f"{what} does not match the {self.kind} record "
                                 f"(tf_transfer/training/run_record.py): {'; '.join(found)}")

    def read(self, record: dict) -> dict:
        """`record` as a reader sees it: every key a record written before the key existed lacks, with the value it
        stands for (`Field.older`), in lists' elements and declared dicts too. `record` itself is not changed."""
        read = dict(record)
        for name, field in self.fields.items():
            if name not in read:
                if field.older is not NO_DEFAULT:
                    read[name] = copy.deepcopy(field.older)
            elif field.item is not None and isinstance(read[name], list):
                read[name] = [field.item.read(e) if isinstance(e, dict) else e for e in read[name]]
            elif field.keys is not None and isinstance(read[name], dict):
                read[name] = field.keys.read(read[name])
        return read

    def with_fields(self, kind: str, *fields: Field) -> "Schema":
        """This schema with `fields` added (or, by name, replaced) under another kind's name."""
        merged = dict(self.fields)
        merged.update({field.name: field for field in fields})
        return Schema(kind, tuple(merged.values()))
