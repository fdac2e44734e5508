"""The adaptive-freezing decision loop that the command's run and the Keras callbacks share, on made-up gradient
norms (no TensorFlow): when a decision is due, what it freezes, what it records, and where the chief is asked."""

from tf_transfer.models.methods.adaptive import decision_loop


class _Norms:
    """Stands in for `BlockGradients`: each interval's norms, in turn."""

    def __init__(self, *intervals):
        self.intervals, self.resets = list(intervals), 0

    def norms(self):
        return self.intervals.pop(0)

    def reset(self):
        self.resets += 1


def test_autofreeze_decides_every_interval_freezes_forward_and_records_each_decision():
    loop = decision_loop.AutoFreezeLoop(num_blocks=4, total_steps=40, first_block=0, min_trainable_layers=1,
                                        interval_steps=2)
    loop.gradients = _Norms([2.0, 2.0, 2.0, 2.0], [1.5, 1.0, 0.5, 0.75], [1.5, 1.0, 0.5, 0.75])
    asked = []

    def agreed(wanted):
        asked.append(wanted)
        return wanted

    assert loop.steps_to_decision(3) == 1 and loop.decide(3, 1, -1, agreed) is None and not asked
    assert loop.decide(2, 1, -1, agreed) is None  # the first interval has nothing to compare with
    wanted, why = loop.decide(4, 1, -1, agreed)
    # Changes 0.25, 0.5, 0.75, 0.625 against their median 0.5625: blocks 0-1 freeze, block 2 changes.
    assert (wanted, why["rule"], why["threshold"]) == (2, "autofreeze", 0.5625)
    assert loop.decide(6, 1, 2, agreed) is None  # no change at all: nothing more freezes, nothing unfreezes
    assert asked == [0, 2, 2] and loop.gradients.resets == 3
    assert [(d["step"], d["frozen_blocks"]) for d in loop.record["decisions"]] == [(2, 0), (4, 2), (6, 2)]


def test_a_freeze_is_recorded_with_what_its_caller_measured():
    loop = decision_loop.FreezeOutLoop(num_blocks=2, total_steps=4, first_block=0, min_trainable_layers=1)
    event = loop.record_freeze(-1, 1, 3, 1, {"rule": "freezeout"}, 1234, cache_s=0.5)
    assert loop.record["events"] == [event]
    assert (event["blocks"], event["embeddings"], event["trainable_params"], event["cache_s"]) == ([0], True, 1234,
                                                                                                  0.5)
