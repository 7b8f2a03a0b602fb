"""The structural keys of a profile's plain-Python view (``Profile.to_dict()``) and its JSON
document (``Profile.to_json()``): the names that hold the records, the modules and the
document's own facts rather than a measured number. The numbers inside them are registered
columns (a record's ``ops``, a module's ``params``); docs/glossary.md lists both."""

from __future__ import annotations

FIELD_KEYS: dict[str, str] = {"index": "call", "path": "module", "type_name": "type"}
"""Attribute -> key: the fields of a record (:class:`~moduleprofiler.records.CallRecord`), a
module (:class:`~moduleprofiler.records.ModuleInfo`) and a peak call whose key in a dict or
JSON document is the frames' name of the same value (``record.path`` is the ``module`` column
of ``to_df()``, so it is ``"module"`` in ``to_dict()`` and the JSON too). Only the root's
spelling differs: ``""`` in dicts and JSON, as ``named_modules()`` and every path list of the
document give it, ``__root__`` in frames. Documents of schema version 4 or less named these
keys by the attribute; they read back all the same."""

DOCUMENT_KEYS: dict[str, str] = {
    # the document
    "document": "what a JSON document is (moduleprofiler.profile, moduleprofiler.latency, "
                "moduleprofiler.distributed): from_json refuses another",
    "moduleprofiler_version": "the moduleprofiler version that wrote the document",
    "schema_version": "the version of the document's layout (5); older ones read back under "
                      "today's names with the same numbers",
    "totals": "the model's totals: params, buffers, ops, macs, flops, backward_ops, "
              "backward_macs, complete, lower_bounds (ops, macs and flops null where the "
              "pass counted nothing: a timing, a memory pass)",
    "lower_bounds": "totals: the totals that are lower bounds (work without a formula)",
    "columns": "how each listener column the document holds is shown and combined, by column "
               "name (so a saved profile renders the same where it is not registered)",
    "kind": "columns: the column's kind (count, bytes, time, ...)",
    "label": "columns: the column's heading",
    "unit": "columns: the column's unit",
    "aggregation": "columns: how a module's calls combine (sum, inclusive, max, first, all, "
                   "none)",
    "additive": "columns: whether the values add up over calls",
    "records": "one object a module call, in the order the calls started: the per-call "
               "frame's columns it holds (call, module, type, parent...), its metrics and "
               "0.0.4's input_size and output_size",
    "modules": "one object a module, in named_modules() order: the module frame's columns it "
               "holds (module, type, depth, params...) and is_leaf, container, shared_tensors",
    "uncalled": "paths of the modules the pass never called",
    "groupings": "paths of the containers (ModuleList, ModuleDict) and the root, whose rows "
                 "group their children",
    "unsupported": "paths of the called modules whose own ops are unknown or only partly "
                   "known (Profile.unsupported)",
    "excluded": "paths of the modules excluded from the ops count (exclude_from_ops)",
    "result": "the result kind a document reads back as (a timing, a memory report, a "
              "prediction)",
    "result_fields": "the figures a result kind adds to its profile (a memory report's "
                     "passes, a prediction's target), read back by their types",
    "unsupported_ops": "operators that ran without a formula, with their call counts",
    "outside_macs": "MACs of operators that ran outside every module call",
    "backward": "whether a backward pass was profiled",
    "backward_unsupported_ops": "backward operators without a formula, with their call "
                                "counts",
    "backward_outside_ops": "backward ops no module call made (the loss, gradient "
                            "accumulation)",
    "backward_outside_macs": "backward MACs no module call made",
    "formula_fallbacks": "modules counted by their operators because their inherited formula "
                         "failed, one line each",
    "unhooked": "paths of the TorchScript submodules that cannot carry hooks (counted in "
                "their nearest hooked ancestor)",
    "module_metrics": "your own per-module columns (Profile.with_metrics), by module path",
    # a record's and a module's fields that are no column
    "metrics": "a record: the listeners' columns of the call, by column name",
    "input_size": "a record: 0.0.4's input_size (its io-size function's first input shape)",
    "output_size": "a record: 0.0.4's output_size",
    "is_leaf": "a module: whether it has no child module",
    "container": "a module: whether it is a ModuleList or ModuleDict (no forward of its own)",
    "shared_tensors": "a module holding a tied tensor: the tensors it shares, with the module "
                      "that owns each",
    # a distributed document
    "profiles": "a distributed document: every rank's profile document, by rank",
    # the JSON's encoding of values that are no JSON value
    "__list__": "JSON: a Python list (a JSON array reads back as a tuple)",
    "__dict__": "JSON: a dict whose keys are no strings, as [key, value] pairs",
    "__float__": "JSON: a number that is not finite (nan, inf)",
    "__repr__": "JSON: a value of another type, as its repr (read back as that string)",
}
"""Every key of a profile's dict and JSON document (and of a distributed one) that no other
table of the glossary holds, with its meaning: docs/glossary.md lists them."""
