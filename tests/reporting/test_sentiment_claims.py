"""Hart's claims checked from made-up results (`sentiment_report.claims_of`): every verdict from an interval against
the claim's margin, BERT's seeds unpaired (one split), the sparse representations paired by fold."""

from tf_transfer.core import stats
from tf_transfer.reporting import claims, sentiment_report


def _model(name, accuracies, f1s):
    runs = [{"seed": i, "accuracy": a, "f1": f} for i, (a, f) in enumerate(zip(accuracies, f1s))]
    return {"model": name, "runs": runs, "accuracy_mean": stats.mean(accuracies), "accuracy_std":
            stats.sample_std(accuracies), "f1_mean": stats.mean(f1s), "f1_std": stats.sample_std(f1s)}


def _sparse(accuracies, f1s):
    folds = [{"fold": i + 1, "accuracy": a, "f1": f} for i, (a, f) in enumerate(zip(accuracies, f1s))]
    return {"folds": folds, "accuracy_mean": stats.mean(accuracies), "f1_mean": stats.mean(f1s)}


def test_claims_from_made_up_results():
    jitter = [0.01, -0.01, 0.005, -0.005, 0.0]
    bert = {"frozen": _model("frozen", [0.80 + j for j in jitter], [0.80 + j for j in jitter]),
            "top2": _model("top2", [0.805 + j for j in jitter], [0.90 + j for j in jitter]),
            "unfrozen": _model("unfrozen", [0.90 + 2 * j for j in jitter], [0.95 + j for j in jitter])}
    sparse = {"tfidf": _sparse([0.70 + j for j in jitter], [0.70 + j for j in jitter]),
              "count": _sparse([0.70 + j + 0.001 for j in jitter], [0.70] * 5),
              "hash": _sparse([0.60 + j for j in jitter], [0.60] * 5)}
    found = sentiment_report.claims_of(sparse, bert)
    verdicts = {claim.claim.split(" (")[0]: claim.verdict for claim in found}
    assert verdicts["Fine-tuning BERT gives no significant gain over frozen BERT"] == claims.NOT_REPRODUCED_AT_PROTOCOL  # +10
    assert verdicts["Unfreezing only two blocks gives no significant gain over frozen BERT"] == stats.REPRODUCED
    assert verdicts["Frozen BERT beats the sparse baselines by about 3 accuracy points"] == stats.REPRODUCED
    assert verdicts["The three sparse representations score alike"] == claims.NOT_REPRODUCED_AT_PROTOCOL  # hashed 10
    assert all("[" in claim.basis for claim in found)  # every basis states its interval
    assert claims.table(found).startswith("| claim |")


def test_no_claims_without_all_models():
    assert sentiment_report.claims_of(None, {}) == []
