"""A grid report's *Still to run* section (`tables.still_to_run`; no TensorFlow needed)."""

from types import SimpleNamespace

from tf_transfer.reporting import tables


def _absent(part, task="stsb"):
    return {"settings": {"task": task, "part": part}, "summary": None, "stand_in": None, "error": None,
            "partial": False}


def test_parts_sort_by_their_numbers_and_one_run_is_singular():
    collected = [_absent("seed 10: BitFit"), _absent("seed 7: BitFit"), _absent("seed 7: BitFit"),
                 _absent("seed 9: LoRA r8"), {**_absent("seed 8: BitFit"), "summary": {"completed": True}}]
    lines = tables.still_to_run("study", collected, SimpleNamespace(commands=[]), ["stsb"])
    listed = [line for line in lines if line.startswith("- ")]
    assert listed == ["- 2 runs of part `seed 7: BitFit` (stsb): not run yet.",
                      "- 1 run of part `seed 9: LoRA r8` (stsb): not run yet.",
                      "- 1 run of part `seed 10: BitFit` (stsb): not run yet."]
    assert "python -m tf_transfer.experiments run study --tasks=stsb --data_dir=$GLUE_DIR" in lines
