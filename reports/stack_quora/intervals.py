"""The intervals behind the claims table of this report: last-epoch validation accuracy of the paper's comparison
(3 seeds each, `runs/paper/`), each model minus another, paired by seed (the three models of a seed share its
validation split and training sample), 95% t intervals and verdicts from `tf_transfer.core.stats`; and the 10-point
rule: the fine-tune-only baseline against the constant prediction on the same validation pairs.

    python reports/stack_quora/intervals.py
"""

import json
import os

from tf_transfer.core import stats

HERE = os.path.dirname(os.path.abspath(__file__))
CONSTANT = 0.6155  # "not a duplicate" for every validation pair of seed 0 (this README, under the grid's table)


def last_accuracy(model: str) -> list:
    return [json.load(open(os.path.join(HERE, "runs", "paper", model, f"seed{seed}", "summary.json")))["epochs"][-1]
            ["val"]["accuracy"] for seed in range(3)]


if __name__ == "__main__":
    sim, bimpm, mlp = (last_accuracy(m) for m in ("sim_transformer_stack_and_finetune", "bimpm_stack_and_finetune",
                                                  "mlp_finetune_only"))
    print(f"fine-tune-only over the constant prediction: {100 * (stats.mean(mlp) - CONSTANT):+.1f} points; "
          f"testable: {stats.learned(mlp, CONSTANT)}")
    for name, a, b in (("Sim-Transformer s&f - mlp", sim, mlp), ("BiMPM s&f - mlp", bimpm, mlp),
                       ("Sim-Transformer s&f - BiMPM s&f", sim, bimpm)):
        interval = stats.paired_difference(a, b)
        print(f"{name}: {stats.verdict_cell(stats.verdict(interval, 0.0, 'at least'), interval, 1, 100)} points "
              f"(Welch {stats.welch_difference(a, b).text(1, 100)})")
