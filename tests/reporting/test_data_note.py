from tf_transfer.reporting.data_note import data_section


def _run(task, train, validation, test, **config):
    return {"summary": {"task": task, "examples": {"train": train, "validation": validation, "test/dev": test},
                        "config": config}}


def test_a_report_says_each_task_s_data_its_cap_and_where_validation_came_from():
    lines = data_section([
        _run("rte", 2490, 0, 277, validation_fraction=0.0),
        _run("rte", 2490, 0, 277, validation_fraction=0.0),
        _run("rte", 2241, 249, 277, validation_fraction=0.1),
        _run("tweets", 300, 40, 100, max_train_examples=300, train_file="/data/train.csv",
             validation_file="/data/val.csv", test_file="/data/test.csv"),
        {"summary": None},  # a run not finished says nothing
    ])
    assert lines[2] == ("- rte: 2 runs: 2,490 training examples (the whole training split), no validation split "
                        "(nothing held out), test 277 (GLUE dev); 1 run: 2,241 training examples (the whole training "
                        "split less validation), validation 249 (10% of the training data held out, seeded), test "
                        "277 (GLUE dev)")
    assert lines[3] == ("- tweets: 300 training examples (capped by --max_train_examples=300), validation 40 "
                        "(`val.csv`), test 100 (`test.csv`)")
    assert data_section([{"summary": None}]) == []
