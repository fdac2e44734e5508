"""Stack-and-finetune on the real CoNLL-2003 ("To Tune or Not To Tune? How About the Best of Both Worlds?", arXiv
1907.05338, its NER experiment): the paper's BiLSTM head under its three strategies (stack-only, finetune-only,
stack-and-finetune), and a reference point, plain token classification (a linear layer on every token, all of BERT
trained: `--head=linear --strategy=finetune_only`), each with 3 seeds paired by seed.

Protocol (`flags/stack_conll_ner.flags`, the cpu variant `flags/stack_conll_cpu.flags`): eng.train for training,
eng.testa as the validation file (the best epoch is picked on its entity F1, and phase 1's gap rule compares with
it; no share of eng.train is held out), eng.testb as the test file, entity F1 by conlleval's counting on eng.testb at
the best validation epoch. Every run trains 6 epochs (stack-and-finetune: phase 1 at most 3 of them), batch 32.

The cpu variant is sized for this project's 2-core machine: all-MiniLM-L6-v2 (uncased, where the paper's flagfile
takes the cased BERT-base) on a fixed random sample of `SAMPLE` eng.train sentences drawn with seed 0, the same for
every arm and seed (`--train_sample_seed`), so the runs of a seed differ only in what the strategy trains. At 1,500
sentences and batch 32 an epoch is 47 steps: finetune-only takes 282 steps at 2e-5 in all, and a fine-tuning that
has not converged by then favours the strategies whose head first trains at 1e-3; the report's numbers are for this
budget, not for all of eng.train.

**Budget**, measured 2026-11-28 on this project's VM (AMD EPYC, AVX2), one process pinned with `taskset -c 1`
while another study kept both cores busy (load about 9 on 2 cores, so these CPU seconds are if anything high), in
CPU seconds of the process: one epoch on 512 sentences took 19.5 s with everything trained (38 ms a sentence) and
7.9 s with BERT frozen (15 ms); scoring eng.testa and eng.testb (6,703 sentences) after every epoch about 78 s (12
ms a sentence; the process's CPU seconds less its training and start-up); phase 1's epochs also score a training
sample as large as the training set; loading, encoding and compiling take about 30-45 s a run. Per seed, with n
training sentences: 24 epochs of scoring (1,870 s) and overheads (135 s) plus 0.80 n s of training, so 3 seeds take
6,000 + 2.4 n CPU s. At n = `SAMPLE` = 1,500: **about 9,600 CPU s, 2.7 core-hours** (1.3-1.4 hours on both cores,
one run per core); scoring, the same whatever n, is about two thirds of it.

    python -m tf_transfer.experiments run stack_conll --variant=cpu --dry_run
    taskset -c 0 python -m tf_transfer.experiments run stack_conll --variant=cpu --runs_dir=reports/stack_conll/runs \\
        --data_dir=../shared/data/conll2003 &
    taskset -c 1 python -m tf_transfer.experiments run stack_conll --variant=cpu --runs_dir=reports/stack_conll/runs \\
        --data_dir=../shared/data/conll2003 &
    python -m tf_transfer.experiments report stack_conll --variant=cpu --runs_dir=reports/stack_conll/runs \\
        --out=reports/stack_conll
"""

from __future__ import annotations

import os

from tf_transfer.reporting import stack_conll_report as report
from tf_transfer.core.errors import TransferError
from tf_transfer.studies.grid import Grid, Variant, own_settings
from tf_transfer.studies.stack.stack_settings import StackSettings

FLAGFILE = "flags/stack_conll_ner.flags"
CPU_FLAGFILE = "flags/stack_conll_cpu.flags"
SEEDS = [0, 1, 2]
# Each compared arm: (head, strategy). The paper's three strategies with its BiLSTM head, and the reference point;
# listed (and run) in this order, the paper's own comparison first.
ARMS = {"stack_and_finetune": ("bilstm", "stack_and_finetune"),
        "finetune_only": ("bilstm", "finetune_only"),
        "token_classification": ("linear", "finetune_only"),
        "stack_only": ("bilstm", "stack_only")}
PARTS = {arm: {"head": [head], "strategy": [strategy], "seed": SEEDS} for arm, (head, strategy) in ARMS.items()}
FILES = {"data": "eng.train", "validation_data": "eng.testa", "test_data": "eng.testb"}
SAMPLE = own_settings(CPU_FLAGFILE, FLAGFILE, StackSettings)["max_train_examples"]

DIFFERENCES = (
    "all-MiniLM-L6-v2 (6 blocks, 384 wide, uncased) in place of the cased BERT-base the NER flagfile names: the "
    "uncased model never sees capitalisation, a strong cue for names.",
    f"A fixed random sample of {SAMPLE:,} of eng.train's 14,041 sentences (seed 0), the same for every arm and seed; "
    "the paper trains on all of eng.train.",
    "The paper states neither its epochs, batch size nor head width; ours are flags/stack_common.flags' (6 epochs, "
    "phase 1 at most 3 and ended by the gap rule, batch 32, 128 LSTM units per direction, 128 word pieces).",
    "The paper's finetune-only NER model passes each word's BERT vector through two fully connected layers; the "
    "reference point here is BERT's own token classification, one linear layer per token.",
    "The shared files tag in IOB2 (every entity starts with B-), not the shared task's original IOB1; the model "
    "learns the tags as given, and conlleval's counting finds the same entities in either scheme.",
)
SMOKE = {"max_train_examples": 64, "max_epochs": 2, "phase1_epochs": 1}
RUN_COMMANDS = tuple(f"taskset -c {core} python -m tf_transfer.experiments run stack_conll --variant=cpu "
                     "--runs_dir=reports/stack_conll/runs --data_dir=../shared/data/conll2003 &" for core in (0, 1))


def layout(runs_dir: str, grid: Grid, run: dict) -> str:
    """`<runs_dir>/<head>_<strategy>/seed<seed>`, as `python -m tf_transfer.stack` names its runs."""
    return os.path.join(runs_dir, f"{run['head']}_{run['strategy']}", f"seed{run['seed']}")


def data_settings(data_dir, data) -> dict:
    """--data_dir: the folder of the shared task's eng.train, eng.testa and eng.testb."""
    if data:
        raise TransferError("--data is not read by stack_conll: give --data_dir, the folder holding eng.train, "
                            "eng.testa and eng.testb (e.g. ../shared/data/conll2003)")
    if not data_dir:
        raise TransferError("--data_dir is required: the folder holding eng.train, eng.testa and eng.testb (e.g. "
                            "../shared/data/conll2003)")
    missing = [name for name in FILES.values() if not os.path.isfile(os.path.join(data_dir, name))]
    if missing:
        raise TransferError(f"--data_dir={data_dir} has no {', '.join(missing)}: point it at the CoNLL-2003 folder "
                            "with the shared task's file names")
    return {setting: os.path.join(data_dir, name) for setting, name in FILES.items()}


def arm_of(settings: dict) -> str:
    """The name in `ARMS` of a run's settings."""
    return next(arm for arm, pair in ARMS.items() if pair == (settings["head"], settings["strategy"]))


GRID = Grid(
    name="stack_conll",
    paper='"To Tune or Not To Tune? How About the Best of Both Worlds?" (arXiv 1907.05338), CoNLL-2003 NER',
    flagfile=FLAGFILE,
    axes={},
    parts=PARTS,
    variants={
        "paper": Variant(),
        "cpu": Variant(settings=own_settings(CPU_FLAGFILE, FLAGFILE, StackSettings), differences=DIFFERENCES,
                       clock="cpu", commands=RUN_COMMANDS),
        # Whether the commands work end to end, in minutes: not a result (give it a small copy of the files).
        "smoke": Variant(settings={**own_settings(CPU_FLAGFILE, FLAGFILE, StackSettings), **SMOKE},
                         differences=("A check of the commands on 64 sentences, one epoch per phase: not a result.",),
                         clock="cpu"),
    },
    report=report.Design(ARMS, SEEDS, arm_of, f"all-MiniLM-L6-v2 (uncased), a seeded sample of {SAMPLE:,} eng.train "
                         "sentences, one CPU core per run").write_report,
    study="stack",
    layout=layout,
    data_settings=data_settings,
    shown=("head", "strategy", "seed", "preset", "max_train_examples"),
)
