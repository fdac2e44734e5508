"""The run record (`tf_transfer/training/run_record.py`): what every kind of `summary.json` holds, checked where it is
written, read with older runs' defaults, and the source of docs/outputs.md's key tables. No training here: the
studies' own tests train through the checks."""

import copy
import glob
import importlib.util
import json
import os

import pytest

from tf_transfer.core.record_schema import RecordMismatch
from tf_transfer.training import run_record
from tf_transfer.training.run_folder import RunFolder

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = sorted(glob.glob(os.path.join(REPO, "reports", "**", "summary.json"), recursive=True))


def committed(kind: str, where: str = "") -> dict:
    """A committed run's summary of `kind` (and path containing `where`), as its file holds it."""
    for path in COMMITTED:
        with open(path) as f:
            summary = json.load(f)
        if where in path and run_record.kind_of(summary) == kind:
            return summary
    raise AssertionError(f"no committed {kind} run {where}")


def as_fresh(summary: dict) -> dict:
    """A completed run's summary as this version's first write would hold it: read with the record's defaults for
    keys that came later, no epochs, nothing its end adds."""
    summary = run_record.read(copy.deepcopy(summary))
    schema = run_record.schema(run_record.kind_of(summary))
    fresh = {k: v for k, v in summary.items() if schema.fields[k].required}
    fresh.update(epochs=[], best_epoch=None, completed=False, stopped_early=False)
    return fresh


def load_reference():
    spec = importlib.util.spec_from_file_location("record_reference", os.path.join(REPO, "docs", "record_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_outputs_tables_are_the_records():
    reference = load_reference()
    with open(os.path.join(REPO, "docs", "outputs.md"), encoding="utf-8") as f:
        text = f.read()
    assert text == reference.render(text), "docs/outputs.md is out of date: run python docs/record_reference.py"
    documented = set()
    for line in text[text.index(reference.BEGIN):text.index(reference.END)].splitlines():
        if line.startswith("| `"):
            documented.add(line.split("`")[1])
    recorded = set()
    for kind in ("glue", "stack", "multitask"):
        schema = run_record.schema(kind)
        recorded |= set(schema.fields) | set(schema.fields["epochs"].item.fields)
    assert documented == recorded  # a key documented is one some run writes, and every key is documented


def test_a_key_documented_but_not_recorded_or_recorded_but_not_documented_is_seen():
    reference = load_reference()
    with open(os.path.join(REPO, "docs", "outputs.md"), encoding="utf-8") as f:
        text = f.read()
    extra = text.replace("| `best_epoch` |", "| `best_round` | int | always |  | made up |\n| `best_epoch` |")
    missing = "".join(line for line in text.splitlines(keepends=True) if not line.startswith("| `cache_mb` |"))
    assert reference.render(extra) != extra and reference.render(missing) != missing
    assert reference.render(extra) == reference.render(missing) == text


def test_every_committed_run_is_of_a_kind_and_matches_it_as_an_older_run():
    assert len(COMMITTED) > 300
    peers = 0
    for path in COMMITTED:
        with open(path) as f:
            summary = json.load(f)
        kind = run_record.kind_of(summary)
        if "transformers" in summary:  # the first-run benchmark's Hugging Face peer: its own shape, not ours
            assert kind is None and run_record.read(summary) == summary, path
            peers += 1
            continue
        assert kind in ("glue", "stack", "multitask"), path
        assert run_record.schema(kind).problems(summary, older=True) == [], path
        read = run_record.read(summary)
        assert read["method"] == summary.get("method", "freeze") and "peak_memory_mb" in read, path
    assert 0 < peers < len(COMMITTED) / 10


def test_older_runs_are_read_with_the_records_defaults_and_their_file_is_not_changed():
    old = committed("glue", "layer_freezing")
    assert "method" not in old  # made before --method existed
    kept = copy.deepcopy(old)
    read = run_record.read(old)
    assert old == kept
    assert read["method"] == "freeze" and read["resumes"] == [] and read["constant_prediction"] is None
    assert {k: v for k, v in read.items() if k in old and k != "epochs"} == {k: v for k, v in old.items()
                                                                            if k != "epochs"}
    assert [{k: e[k] for k in kept_epoch} for e, kept_epoch in zip(read["epochs"], old["epochs"])] == old["epochs"]
    assert read["epochs"][0]["peak_memory_mb"] is None and "peak_memory_mb" not in old["epochs"][0]
    lora = run_record.read({**committed("glue", "/methods/"), "method": "lora",
                            "lora": {"rank": 8, "alpha": 8.0, "targets": ["query"], "layers": 6, "weights": 1}})
    assert lora["lora"]["init"] == "gaussian"  # LoRA runs before 2026-11-25 drew A from a Gaussian
    assert run_record.read({"epochs": "not a list"}) == {"epochs": "not a list"}  # no kind: as it is
    assert run_record.read(None) is None


def test_a_summary_is_checked_where_it_is_written(tmp_path):
    fresh = as_fresh(committed("glue", "/methods/"))
    folder = RunFolder(str(tmp_path / "run"), settings=fresh["config"])
    folder.kind = "glue"
    bad = [({k: v for k, v in fresh.items() if k != "metric"}, "'metric' is missing"),
           ({**fresh, "lr": "fast"}, "'lr' is a str, not float or null"),
           ({**fresh, "surprise": 1}, "'surprise' is not a key of the glue record"),
           ({**fresh, "epochs": [{"epoch": 1}]}, "'epochs[0].loss' is missing")]
    for summary, why in bad:
        with pytest.raises(RecordMismatch, match=why.replace("[", r"\[").replace("]", r"\]")):
            folder.start(summary)
        assert not os.path.exists(folder.path)  # nothing written, not even its folder
    folder.start(fresh)
    folder.summary["completed"] = True
    with pytest.raises(RecordMismatch, match="'finished_at' is missing; 'train_time_s' is missing; "
                                             "'constant_prediction' is missing"):
        folder.write()  # a completed GLUE run says what it trained in all and its constant prediction
    for kind in ("stack", "multitask"):
        run_record.check(kind, as_fresh(committed(kind)), "summary.json")


def test_a_run_started_by_an_older_version_resumes_without_the_keys_that_came_later():
    old = {**committed("glue", "layer_freezing"), "completed": False}
    with pytest.raises(RecordMismatch, match="'method' is missing"):
        run_record.check("glue", old, "summary.json")
    run_record.check("glue", old, "summary.json", resumed=True)
    old["epochs"][0]["loss"] = "high"
    with pytest.raises(RecordMismatch, match=r"'epochs\[0\].loss' is a str"):
        run_record.check("glue", old, "summary.json", resumed=True)  # what it has must still be of its type


def test_a_sentiment_seeds_work_file_has_its_own_kind():
    work = {"seed": 0, "config": {}, "distribution": None, "epochs": [], "compile_time_s": None,
            "completed": False, "started_at": "2026-11-26T00:00:00+0000"}
    assert run_record.kind_of(work) == "sentiment_bert"
    run_record.check("sentiment_bert", work, "summary.json")
    with pytest.raises(RecordMismatch, match="'task' is not a key of the sentiment_bert record"):
        run_record.check("sentiment_bert", {**work, "task": "x"}, "summary.json")
    with pytest.raises(ValueError, match="no run record of kind 'bert'"):
        run_record.schema("bert")


def test_what_the_sweep_keeps_of_a_run_are_keys_of_the_record():
    from tf_transfer.studies.sweep import sweep_storage

    glue = run_record.schema("glue")
    assert set(sweep_storage.RUN_KEYS) <= set(glue.fields)
    assert set(sweep_storage.EPOCH_KEYS) <= set(glue.fields["epochs"].item.fields)


def test_the_stack_pages_key_table_names_keys_of_the_stack_record():
    with open(os.path.join(REPO, "docs", "stack.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Outputs"):]
    section = section[:section.index("\n\n", section.index("| key | meaning |"))]
    named = {name for line in section.splitlines() if line.startswith("| `")
             for name in line.split("|")[1].replace("(NER)", "").replace("`", "").replace(" ", "").split(",")}
    stack = run_record.schema("stack")
    keys = set(stack.fields) | {f"epochs[].{name}" for name in stack.fields["epochs"].item.fields}
    assert named and named <= keys, named - keys
