"""The stack_conll study: its grid (paired arms, one sample for every run), its data folder, and its report built
from fabricated summaries (nothing trains; no CoNLL-2003 sentence is read or written)."""

import os

import pytest

from experiments import stack_conll
from tf_transfer.reporting import stack_conll_report as report
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.stack.stack_settings import StackSettings

# Test F1 per arm and seed (fabricated): stack-and-finetune ahead of finetune-only by about 1 point on every seed.
F1 = {"stack_and_finetune": [0.801, 0.812, 0.806], "finetune_only": [0.791, 0.800, 0.797],
      "token_classification": [0.803, 0.807, 0.815], "stack_only": [0.702, 0.690, 0.711]}


def test_every_arm_and_seed_trains_on_one_sample_with_eng_testa_for_validation():
    runs = stack_conll.GRID.runs("cpu")
    assert len(runs) == len(stack_conll.ARMS) * len(stack_conll.SEEDS) == 12
    assert {(r["head"], r["strategy"]) for r in runs} == set(stack_conll.ARMS.values())
    # The sample is the same for every run: one size, one sample seed whatever --seed.
    assert {(r["max_train_examples"], r["train_sample_seed"], r["preset"]) for r in runs} == {
        (stack_conll.SAMPLE, 0, "all_minilm_l6_v2_en")}
    # The paper's own comparison is listed first, its seeds together.
    assert [(r["strategy"], r["seed"]) for r in runs[:4]] == [("stack_and_finetune", 0), ("stack_and_finetune", 1),
                                                                ("stack_and_finetune", 2), ("finetune_only", 0)]
    for run in runs:  # every run's settings are valid stack settings once the data folder is given
        settings = {k: v for k, v in run.items() if k != "part"}
        StackSettings.from_dict({**settings, "data": "eng.train", "validation_data": "eng.testa",
                                 "test_data": "eng.testb"})
    assert stack_conll.layout("runs", stack_conll.GRID, runs[0]) == os.path.join("runs", "bilstm_stack_and_finetune",
                                                                                  "seed0")


def test_the_data_folder_must_hold_the_shared_tasks_three_files(tmp_path):
    for name in ("eng.train", "eng.testa"):
        (tmp_path / name).write_text("")
    with pytest.raises(TransferError, match="has no eng.testb"):
        stack_conll.data_settings(str(tmp_path), None)
    (tmp_path / "eng.testb").write_text("")
    given = stack_conll.data_settings(str(tmp_path), None)
    assert given == {"data": str(tmp_path / "eng.train"), "validation_data": str(tmp_path / "eng.testa"),
                     "test_data": str(tmp_path / "eng.testb")}
    with pytest.raises(TransferError, match="--data_dir is required"):
        stack_conll.data_settings(None, None)


def test_a_validation_file_replaces_the_held_out_share_and_the_sample_is_the_same_for_every_seed(tmp_path):
    from tf_transfer.studies.stack import stack_inputs

    # IOB1 as the shared task wrote it (I- opens an entity, B- only between two of one type), -DOCSTART- lines.
    sentences = [f"w{i} NN I-NP {'I-PER' if i % 3 else 'O'}\nx{i} NN I-NP {'B-PER' if i % 3 == 1 else 'O'}\n"
                 for i in range(20)]
    files = {}
    for name, part in (("eng.train", sentences[:12]), ("eng.testa", sentences[12:16]), ("eng.testb", sentences[16:])):
        files[name] = tmp_path / name
        files[name].write_text("-DOCSTART- -X- -X- O\n\n" + "\n".join(part))
    given = {"task": "conll_ner", "head": "bilstm", "data": str(files["eng.train"]),
             "validation_data": str(files["eng.testa"]), "test_data": str(files["eng.testb"]),
             "max_train_examples": 5, "train_sample_seed": 0}
    read = [stack_inputs.read_data(StackSettings.from_dict({**given, "seed": seed})) for seed in (0, 1)]
    assert [len(read[0].splits[name]) for name in ("train", "validation", "test")] == [5, 4, 4]
    assert read[0].splits["validation"].words[0] == ["w12", "x12"]  # eng.testa itself, in file order
    assert read[0].splits["train"].words == read[1].splits["train"].words  # one sample whatever --seed
    assert read[0].splits["train"].words != [[f"w{i}", f"x{i}"] for i in range(5)]  # drawn, not the first five
    assert read[0].label_names == ("O", "B-PER", "I-PER")
    assert set(stack_inputs.data_files(StackSettings.from_dict(given))) == {"data", "validation_data", "test_data"}
    # Runs of before --validation_data and --train_sample_seed record neither, so they are still found as completed.
    assert not {"validation_data", "train_sample_seed"} & set(StackSettings.from_dict(
        {"task": "conll_ner", "head": "bilstm", "data": "eng.train"}).to_dict())


def _summary(arm: str, seed: int) -> dict:
    f1 = F1[arm][seed]
    head, strategy = stack_conll.ARMS[arm]
    epoch = {"epoch": 2, "phase": 2, "val": {"f1": f1 + 0.02, "accuracy": 0.95},
             "test": {"f1": f1, "accuracy": 0.9 + f1 / 10}, "train_time_s": 100.0, "train_cpu_s": 90.0 + seed}
    last = {**epoch, "epoch": 3, "val": {"f1": f1, "accuracy": 0.94}, "test": {"f1": 0.1, "accuracy": 0.5}}
    return {"completed": True, "seed": seed, "head": head, "strategy": strategy, "best_epoch": 2,
            "epochs": [{**epoch, "epoch": 1, "val": {"f1": 0.0}}, epoch, last],
            "examples": {"train": 2000, "validation": 3250, "test": 3453},
            "truncated_words": {"train": 0, "validation": 1, "test": 0}, "labels": ["O", "B-LOC", "I-LOC"],
            "config": {"train_sample_seed": 0}, "machine": {"cpu": "AMD EPYC", "cores": 2, "isa": ["avx2"]}}


def _collected(done) -> list:
    return [{"settings": {"head": stack_conll.ARMS[arm][0], "strategy": stack_conll.ARMS[arm][1], "seed": seed},
             "folder": f"runs/{arm}/seed{seed}", "summary": _summary(arm, seed) if (arm, seed) in done else None,
             "partial": None, "error": None, "stand_in": None}
            for seed in stack_conll.SEEDS for arm in stack_conll.ARMS]


def _claim_line(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"| {start}"))


def test_the_report_judges_each_claim_on_seed_paired_test_scores_at_the_best_validation_epoch(tmp_path):
    everything = {(arm, seed) for arm in stack_conll.ARMS for seed in stack_conll.SEEDS}
    path = stack_conll.GRID.report(_collected(everything), str(tmp_path), stack_conll.GRID, "cpu")
    text = open(path).read()
    # +1.0, +1.2, +0.9 points: the paired interval lies above 0 (the last epoch's 0.1 would say otherwise).
    f1_claim = _claim_line(text, "stack-and-finetune above finetune-only, entity F1")
    assert "| +0.068 F1 | +1.03 [" in f1_claim and "| reproduced |" in f1_claim and "(3 seed(s))" in f1_claim
    assert "| reproduced |" in _claim_line(text, "finetune-only above stack-only")
    # Against token classification the differences straddle 0 (-0.2, +0.5, -0.9): no verdict either way.
    assert "| inconclusive |" in _claim_line(text, "stack-and-finetune (BiLSTM) above plain token classification")
    assert "| stack_and_finetune | bilstm | stack_and_finetune | 3/3 | 80.63 ± 0.55 |" in text
    assert "| 0 | 80.10 | 79.10 | 80.30 | 70.20 |" in text
    assert "uncased" in text and "taskset -c 1" in text and "12 of 12 runs completed" in text


def test_a_claim_without_a_seed_on_both_sides_is_not_run_yet_and_one_seed_gives_no_interval(tmp_path):
    done = {("stack_and_finetune", 0), ("finetune_only", 0), ("stack_only", 1)}
    text = open(stack_conll.GRID.report(_collected(done), str(tmp_path), stack_conll.GRID, "cpu")).read()
    assert "| not run yet | not run yet |" in _claim_line(text, "finetune-only above stack-only")
    one_seed = _claim_line(text, "stack-and-finetune above finetune-only, entity F1")
    assert "(no interval)" in one_seed and "| inconclusive |" in one_seed
    assert "| 1 | not run yet | not run yet | not run yet | 69.00 |" in text
    assert "3 of 12 runs completed" in text
    assert report.run_facts(_summary("stack_only", 1))["best_epoch"] == 2
