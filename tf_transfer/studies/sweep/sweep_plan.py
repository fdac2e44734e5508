"""What a sweep needs, said before it trains: the time an answer takes on this machine, and what a budget buys.

Before the first trial, a few training steps on the user's own data (`measure`, in a process pinned as a worker's is)
give this machine's seconds per example of full fine-tuning and a run's start-up; a few steps that train the last block
alone give the seconds of one block's forward pass (the step's forward through every block and backward through one, at
twice a forward: `block_s`). Full fine-tuning costs what was measured (its embeddings' gradients and update included);
every other candidate its work in block passes (`sweep_estimate.relative_cost`) at `block_s` each, over the examples it
trains on and scores after every epoch, and its frozen-prefix cache's build (a forward pass of the frozen blocks over
every split, once per depth and seed: the runs that freeze as many blocks share it). The sweep's own schedule is then
played out (`plan`) on its workers: the reference until it learns (full fine-tuning's seed 0 resumes its run later), the
other workers starting the next candidates meanwhile (their reports wait for the first rung), or, where the budget
compares full fine-tuning (`order`), full fine-tuning at every seed at once, its seed 0 measuring the first rung as it
goes on; every other candidate at seed 0 cheapest first, successive halving's promoted further, then the seed round;
and, with a budget, the sweep's rule that queues the seed round as soon as the next candidate and it would not both fit.
What is not known before training is assumed and said: the reference learns in its first epoch, a run that is not pruned
reaches its best score after `ASSUMED_BEST_STEPS` optimizer steps and stops `patience` epochs later (so after more
epochs on a small file, whose epochs are few steps), full fine-tuning goes on at every rung and into the seed round (it
is what every answer is compared with, and often the best), and the others' scores at a rung come in random order, so
that one goes on by its place in the queue alone (`promoted`). Queued cheapest first, full fine-tuning meets the others
at the rungs, and the first line states before that bound the case where successive halving stops it by epoch 3
(`STOPPED_BY`, `full_pruned`); where it does not, the sweep says so then (`second_case_line`).

Example:

>>> from tf_transfer.studies.sweep import sweep_plan
>>> speed = sweep_plan.Speed(example_s=0.02, block_s=0.001, startup_s=20.0, num_layers=6, train_examples=5400,
...                          scored_examples=600, steps_per_epoch=169)
>>> found = {"freeze_k2_lr0.0003": {"trainable_layers": 2, "cache_frozen": True, "lr": 3e-4},
...          "freeze_kall_lr5e-05": {"trainable_layers": "all", "lr": 5e-5}}
>>> p = sweep_plan.plan(found, "freeze_kall_lr5e-05", speed, workers=2, max_epochs=5, patience=2)
>>> round(p.needed_s / 60), p.candidates
(22, 2)
>>> queue, p = sweep_plan.order(found, "freeze_kall_lr5e-05", speed, 2, 5, 2, budget_s=900)
>>> queue, p.reached  # too little to compare full fine-tuning: the cheapest first, and it decides among 1
(['freeze_k2_lr0.0003', 'freeze_kall_lr5e-05'], 1)
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from typing import Callable, Optional

from tf_transfer.models import freezing
from tf_transfer.studies.sweep import sweep_estimate, sweep_search as sweep, sweep_seed_round

ASSUMED_FIRST_RUNG = 1  # the reference (full fine-tuning at its larger rate) beats the constant prediction at once
# A run that is not pruned: its best epoch is the first to end after this many steps, then `patience` more. Steps, not
# epochs: three sweeps' runs that were not pruned (all_minilm at batch 32 on 5,481, 3,600 and 1,350 training examples)
# had their best epochs after 360, 407 and at least 275 steps on the mean, while a fixed 3 epochs put the smallest
# file's runs at about half their length.
ASSUMED_BEST_STEPS = 350
# The first case the first line states beside the bound: queued cheapest first, full fine-tuning is ranked with the
# others at the rungs (r and 3r), and in every sweep on the first-run benchmark's SST-5 and STS-B files it was pruned
# there, after epoch 1 or 3: its later epochs and further seeds are then not trained. On Quora, where it scores best,
# it went on in all three sweeps with the 3 default candidates that ranked it at epoch 3 (2026-11-30, 12-01): the
# second case, said when it comes (`second_case_line`). The bound (it goes on, into the seed round) is what the
# budget's queue is ordered by.
STOPPED_BY = sweep.REDUCTION_FACTOR * ASSUMED_FIRST_RUNG
# How far a plan may fall short of what the sweep then takes: it prices from a few steps timed as it starts, and a
# VM's speed drifts within the half hour. On the first-run benchmark's files (2-core AVX2 EPYC, 2026-11-30) its
# trials took 25.1, 24.8 and 29.4 minutes where the plans said 25, 25 and 27 (STS-B: its budget was spent with one
# run not started, priced here as its other seed took), and less where they said more. Within this of the plan, a
# budget is said to be enough with little to spare.
PLAN_SHORTFALL = 0.10
LITTLE_TO_SPARE = f"with less than {PLAN_SHORTFALL:.0%} to spare (the machine's speed drifts as it runs)"


@dataclasses.dataclass(frozen=True)
class Speed:
    """This machine's measured speed on the sweep's data, one worker's: seconds per training example of full
    fine-tuning (`example_s`) and of one encoder block's forward pass (`block_s`), a run's start-up before its first
    step (`startup_s`: its process, TensorFlow, the data, the model, compilation), the encoder's depth, the
    examples a run trains on and scores each epoch, and its training steps each epoch."""

    example_s: float
    block_s: float
    startup_s: float
    num_layers: int
    train_examples: int
    scored_examples: int
    steps_per_epoch: int


@dataclasses.dataclass(frozen=True)
class Plan:
    """The sweep played out: `needed_s`, the wall time to its answer (every candidate at seed 0, then the seed
    round); `training_s`, the training time that spends (summed over runs, a reference run's included); with a
    budget, `reached` (candidates at seed 0 within it, cheapest first), whether the seed round fits after them
    (`answers`), and the wall time that spends (`spent_s`); whether full fine-tuning was queued first
    (`full_first`: `order`); the budget it was played out in (`budget_s`)."""

    needed_s: float
    training_s: float
    candidates: int
    workers: int
    reached: Optional[int] = None
    answers: Optional[bool] = None
    spent_s: Optional[float] = None
    full_first: bool = True
    budget_s: Optional[float] = None


def measure(settings: dict, steps: int = 8, warmup_steps: int = 2) -> Speed:
    """Times `steps` training steps of full fine-tuning at `settings` (the sweep's base: its data, preset, padding
    and batch) after `warmup_steps`, then as many training the last block alone, in this process: its start-up is
    this call's time before the first timed steps, TensorFlow's import included where this process had not made it
    (in a process of its own, as each of the sweep's trials runs)."""
    # Before the imports: a trial's process pays TensorFlow's (5-9 s here), which a plan that left it out did not
    # price (a 300-row sweep, whose runs take 20-65 s, planned 5.2 minutes of training and spent 5.7).
    start = time.perf_counter()
    from tf_transfer.studies.glue import glue_benchmark
    from tf_transfer.studies.glue.glue_settings import GlueSettings

    def timed(trainable_layers) -> dict:
        one = {**settings, "trainable_layers": trainable_layers, "cache_frozen": False, "seed": 0}
        return glue_benchmark.measure(GlueSettings.from_dict(one), steps=steps, warmup_steps=warmup_steps)

    full = timed(freezing.ALL)
    startup_s = time.perf_counter() - start - full["step_time_s"] * full["timed_steps"]
    # Measured rather than assumed: full fine-tuning's step is more than its block passes (the embeddings' gradients
    # and the update of their 12 million weights), and a forward pass less than a third of it.
    last = timed(1)
    layers, sizes = full["num_layers"], full["split_examples"]
    return Speed(example_s=1.0 / full["train_examples_per_s"],
                 block_s=1.0 / last["train_examples_per_s"] / sweep_estimate.relative_cost({"trainable_layers": 1},
                                                                                           layers),
                 startup_s=startup_s, num_layers=layers, train_examples=sizes["train"],
                 scored_examples=sum(n for name, n in sizes.items() if name != "train"),
                 steps_per_epoch=-(-sizes["train"] // int(settings["batch_size"])))


def run_cost(settings: dict, speed: Speed) -> tuple:
    """`(fixed_s, epoch_s)` of a candidate's run: start-up and cache build (`build_s`), then each epoch (training and
    scoring)."""
    layers = speed.num_layers
    k = settings["trainable_layers"]
    trained = layers if k == freezing.ALL else int(k)
    cached = bool(settings.get("cache_frozen"))
    passes = sweep_estimate.relative_cost(settings, layers)
    # Full fine-tuning (every block's weights' gradients, with no cache) is the step that was timed.
    full = passes == sweep_estimate.relative_cost({"trainable_layers": freezing.ALL}, layers) and not cached
    trained_s = speed.example_s if full else speed.block_s * passes
    scored_blocks = trained if cached else layers
    epoch = speed.train_examples * trained_s + speed.scored_examples * speed.block_s * scored_blocks
    return speed.startup_s + build_s(settings, speed), epoch


def build_s(settings: dict, speed: Speed) -> float:
    """Seconds of a candidate's frozen-prefix cache build (a forward pass of its frozen blocks over every split), 0
    without a cache."""
    frozen = sweep_estimate.cache_of(settings, speed.num_layers)
    return speed.block_s * (speed.train_examples + speed.scored_examples) * frozen if frozen else 0.0


def _built_before(names: list, found: dict, layers: int) -> list:
    """Those of `names` (one seed's runs, in order) whose cache an earlier one of them built."""
    seen, shared = set(), []
    for name in names:
        key = sweep_estimate.cache_of(found[name], layers)
        if key is not None and key in seen:
            shared.append(name)
        seen.add(key)
    return shared


def plan(found: dict, reference: str, speed: Speed, workers: int, max_epochs: int, patience: int, top: int = 3,
         seeds: int = 3, budget_s: Optional[float] = None, full_first: bool = True, front: bool = False,
         full_pruned: bool = False) -> Plan:
    """The sweep over `found` (`sweep.candidates`, cheapest first) played out on `workers` (module docstring);
    with `budget_s`, within it (wall time on these workers). The queue after the reference: `reference`'s candidate
    (full fine-tuning) first where `full_first`, then the others cheapest first; else all cheapest first (`order`).
    Each run's duration is its expected one: where successive halving would stop it, by `promoted` at each rung
    (`reference`'s candidate always goes on; with `front`, candidates chosen from the score/time front, every one:
    `_goes_on`); the seed round's runs, `reference`'s candidate's and, for the rest, the mean run to the stopping
    rule of the others weighted by how likely each gets there, one per setting (the seed round takes each at one
    rate: `sweep_seed_round.candidates`); a run whose cache a run built before it (of any seed: a seed's splits read
    one cache of the file's examples, `cache_pool.pool`), without the build (`sweep_estimate.cache_of`).
    `full_pruned` (queued cheapest first only): full fine-tuning stopped at the second rung and so not in the seed
    round, the first line's first case (`STOPPED_BY`)."""
    best = min(max(math.ceil(ASSUMED_BEST_STEPS / speed.steps_per_epoch), 1), max_epochs)
    stop = min(max_epochs, best + patience)
    rung = min(ASSUMED_FIRST_RUNG, max_epochs)
    costs = {name: run_cost(settings, speed) for name, settings in found.items()}
    names = ([reference] if full_first else []) + [name for name in found if name != reference or not full_first]
    full_pruned = full_pruned and not full_first  # queued first, full fine-tuning is never ranked at a rung
    goes_on = _goes_on(names, names[1:] if full_first else names, reference, front, full_pruned)
    middle = min(sweep.REDUCTION_FACTOR * rung, stop)
    first_runs = {name: costs[name][0] + costs[name][1] * (rung + p1 * (middle - rung) + p2 * (stop - middle))
                  for name, (p1, p2) in goes_on.items()}
    fixed, epoch = costs[reference]
    reference_s = fixed + rung * epoch  # a reference run: the first rung is known when it ends
    if not full_first:  # its candidate's seed-0 run resumes the reference's: those epochs are not trained again
        first_runs[reference] -= rung * epoch
    for name in _built_before(names, found, speed.num_layers):  # its depth's cache, built by a run before it
        first_runs[name] -= build_s(found[name], speed)
    # Full fine-tuning queued first measures the first rung in its seed-0 run, which goes on (`sweep_search`): no
    # reference run (its further seeds start at once); else the reference takes one worker, the others start the
    # cheapest candidates meanwhile (their reports wait for the first rung: `sweep_trial`).
    start = [0.0] * workers if full_first else [reference_s] + [0.0] * (workers - 1)

    def whole(name: str) -> float:
        return costs[name][0] + stop * costs[name][1]

    # Full fine-tuning queued first runs at every seed at once (`sweep_search.open_study`): its further seeds fill
    # the workers while its seed 0 runs, and the seed round takes the best `top - 1` of the others.
    early = [whole(reference)] * (seeds - 1) if full_first else []

    def seed_round(among: list) -> list:
        full = [whole(reference)] if reference in among and not (full_first or full_pruned) else []
        return _seed_round(full, [name for name in among if name != reference], found, whole, goes_on, speed,
                           top - 1 if full_first else top - len(full), seeds)

    runs = list(first_runs.values())
    seed0 = runs[:1] + early + runs[1:]
    after_first = _schedule(runs[1:], _schedule(runs[:1] + early, start))
    needed = max(_schedule(seed_round(names), [max(after_first)] * workers))
    training = (0.0 if full_first else reference_s) + sum(seed0) + sum(seed_round(names))
    if budget_s is None:
        return Plan(needed, training, len(found), workers, full_first=full_first)
    reached, spent = _within(budget_s, [first_runs[name] for name in names], early, start, reference_s,
                             lambda i: seed_round(names[:i]))
    return Plan(needed, training, len(found), workers, reached, reached > 0, spent, full_first, budget_s)


def _seed_round(full: list, others: list, found: dict, whole: Callable, goes_on: dict, speed: Speed, slots: int,
                seeds: int) -> list:
    """The seed round's runs (each of seeds 1..`seeds`-1): full fine-tuning's (`full`: its whole run, where it is
    among the best) and, of the `others` that ran to their stopping rule, `slots` settings (each at one rate:
    `sweep_seed_round.configuration`) at the mean run of the others weighted by how likely each gets there
    (`goes_on`), without its cache's build: every seed's run reads the cache its seed-0 run built
    (`cache_pool.pool`)."""
    weights = [goes_on[name][1] for name in others]
    mean = sum(w * (whole(n) - build_s(found[n], speed)) for w, n in zip(weights, others)) / (sum(weights) or 1)
    settings = {sweep_seed_round.configuration(name, found): name for name in others}
    chosen = full + [mean] * min(slots, len(settings))
    return [run for run in chosen for _ in range(seeds - 1)]


def _within(budget_s: float, first_runs: list, early: list, start: list, reference_s: float,
            seed_round: Callable) -> tuple:
    """`(reached, spent_s)`: by the sweep's rule (once the next candidate and the seed round would not both fit, the
    seed round goes first), how many of the queue's seed-0 runs (`first_runs`, in order; `early` after the first)
    and their seed round (`seed_round(i)`: of the first i) fit in `budget_s` on workers free at `start`."""
    reached, free, spent = 0, start, reference_s
    for i, run in enumerate(first_runs):
        trial = _schedule([run] + (early if i == 0 else []), free)
        ends = max(_schedule(seed_round(i + 1), [max(trial)] * len(start)))
        if ends > budget_s:
            break
        free, reached, spent = trial, i + 1, ends
    return reached, spent


def _goes_on(names: list, ranked: list, reference: str, front: bool = False, full_pruned: bool = False) -> dict:
    """`{name: (chance it goes on at the first rung, and at 3r)}` of the candidates queued in `names`, of which
    `ranked` meet successive halving (full fine-tuning queued first ranks nothing at the rungs), by `promoted`; with
    `front` (candidates chosen from the score/time front, queued cheapest first, so each scores above the cheaper
    ones before it), every one. The default candidates are the first-run benchmark's front: in the sweeps on its
    files so far (2026-11-28 and 29), the last 2 blocks were pruned at the first rung in every one on SST-5 and
    STS-B (10 sweeps; LoRA at 5e-4 in one of them), nothing in the 7 on SST-2 and Quora, where random order
    (`promoted`) expects about half of the others' runs pruned: an upper bound, closer than random order."""
    goes_on = {name: (1.0, 1.0) for name in names}
    if not front:
        first = promoted(len(ranked))  # at the first rung, by place in the queue
        second = promoted(max(round(sum(first)), 1))  # at 3r, among those expected to reach it
        goes_on.update({name: (first[i], first[i] * second[min(round(sum(first[:i + 1])), len(second)) - 1])
                        for i, name in enumerate(ranked)})
    # Full fine-tuning, what every answer is compared with and often the best: on at every rung, into the seed round;
    # where `full_pruned` (the likely case queued cheapest first: `STOPPED_BY`), on at the first rung, not the second.
    goes_on[reference] = (1.0, 0.0) if full_pruned else (1.0, 1.0)
    return goes_on


def order(found: dict, reference: str, speed: Speed, workers: int, max_epochs: int, patience: int, top: int = 3,
          seeds: int = 3, budget_s: Optional[float] = None, front: bool = False) -> tuple:
    """`(queue, plan)`: the candidates' queue after the reference and its plan. Full fine-tuning (at every seed)
    first where the budget compares it (`budget_s`, if any, reaches it and the seed round): every answer is compared
    with it and it takes longest, so started first it is not the run that ends last. Else all cheapest first (the
    budget's answer is decided among the cheapest; full fine-tuning, queued last, is compared only if reached)."""
    first = plan(found, reference, speed, workers, max_epochs, patience, top, seeds, budget_s, front=front)
    if budget_s is None or first.reached == len(found) or (first.reached or 0) > 1:  # full fine-tuning and another
        return [reference] + [name for name in found if name != reference], first
    return list(found), plan(found, reference, speed, workers, max_epochs, patience, top, seeds, budget_s, False, front)


def promoted(trials: int, reduction_factor: int = sweep.REDUCTION_FACTOR) -> list:
    """The chance that the i-th of `trials` to reach a rung goes on, by Optuna's successive-halving rule with scores
    in random order: the best `i // reduction_factor` of the `i` that have reached it so far, or the best alone
    while that is 0 (the first always goes on). The cheap candidates, queued first, go on more often.

    >>> [round(p, 2) for p in promoted(6)]
    [1.0, 0.5, 0.33, 0.25, 0.2, 0.33]
    """
    return [max(i // reduction_factor, 1) / i for i in range(1, trials + 1)]


def _schedule(jobs: list, free: list) -> list:
    """When each worker is free again after `jobs` (seconds, in order), each started on the first free worker."""
    free = list(free)
    heapq.heapify(free)
    for seconds in jobs:
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return free


def first_line(p: Plan, budget_s: float, given: Optional[str] = None, likely: Optional[Plan] = None,
               timing_s: float = 0.0) -> str:
    """What the sweep says before it trains: the budget an answer needs here, and what the given one (`budget_s`
    left of it after the plan's probe; `given`, the user's --budget, where that is what the line should name)
    decides. `likely`: the same sweep where successive halving stops full fine-tuning at its second rung (`plan`'s
    `full_pruned`; queued cheapest first, it meets the others there), said first, `p` as the bound. The --budget it
    suggests adds `timing_s`, what the probe took of the given one (a sweep said "give --budget=30m" to a
    --budget=30m that its probe left 29 minutes of)."""
    on = f"{p.workers} workers, one per core" if p.workers > 1 else "1 worker"
    needed = f"an answer over all {p.candidates} candidates needs about {_minutes(p.needed_s)} on {on}"
    if likely is not None and _minutes(likely.needed_s) != _minutes(p.needed_s):
        needed = (f"an answer over all {p.candidates} candidates needs about {_minutes(likely.needed_s)} on {on}, "
                  f"if successive halving stops full fine-tuning by epoch {STOPPED_BY} (it goes on there only "
                  f"among the best third of the runs; docs/methods.md), {_minutes(p.needed_s)} if not")
    left, give = _budget_words(p, budget_s, timing_s)
    budget = f"--budget={given} ({left} left after timing this machine)" if given and given != left else \
        f"--budget={left}"
    if p.reached is None or budget_s >= p.needed_s:
        if budget_s >= p.needed_s * (1 + PLAN_SHORTFALL):
            return f"[sweep] {needed}; {budget} is enough"
        return f"[sweep] {needed}; {budget} is enough by the plan, {LITTLE_TO_SPARE}: give --budget={give} for room"
    if not p.answers:
        return (f"[sweep] {needed}; {budget} is too little for any answer (the reference, one candidate and the seed "
                f"round need more): give --budget={give}")
    if likely is not None and budget_s >= likely.needed_s:
        spare = "" if budget_s >= likely.needed_s * (1 + PLAN_SHORTFALL) else f", {LITTLE_TO_SPARE}"
        return (f"[sweep] {needed}; {budget} is enough in the first case{spare}, in the second "
                f"{_decides(p.reached)} (about {_minutes(p.spent_s)}): give --budget={give} for all in either")
    if p.full_first:
        decides, rest = ("decides full fine-tuning alone" if p.reached == 1 else
                         f"decides among full fine-tuning and {_cheapest(p.reached - 1)} of the others"), ""
    else:  # a run stopped early frees its time: sweeps on the benchmark's files reached more, full fine-tuning too
        decides = _decides(p.reached, " of them")
        rest = "" if p.reached == p.candidates else \
            ", more where successive halving stops some early (full fine-tuning, queued last, only then)"
    return (f"[sweep] {needed}; {budget} {decides} (about {_minutes(p.spent_s)}){rest}: "
            f"give --budget={give} for all")


def _cheapest(n: int) -> str:
    return "the cheapest" if n == 1 else f"the {n} cheapest"


def _decides(reached: int, of: str = "") -> str:
    """What a budget that reaches the `reached` cheapest candidates decides (`of`: " of them").

    >>> _decides(2), _decides(1, " of them")
    ('decides among the 2 cheapest', 'decides the cheapest of them alone')
    """
    return f"decides {_cheapest(reached)}{of} alone" if reached == 1 else f"decides among {_cheapest(reached)}{of}"


def second_case_line(p: Plan, budget_s: float, given: Optional[str] = None, likely: Optional[Plan] = None,
                     timing_s: float = 0.0) -> Optional[str]:
    """What the sweep says when the second case of its first line comes (`first_line`'s arguments), where that line
    called the budget enough in the first case only: successive halving kept full fine-tuning at its second rung
    (`{epoch}`, filled in then by `sweep_trial`), so the budget decides among the cheapest, and a rerun with the
    budget for all goes on from the runs it has. None where there is nothing to say then. A user told "enough" learns
    it while the sweep trains (on the first-run benchmark's Quora file at minute 15 of 36), not from its report."""
    if likely is None or p.reached is None or not p.answers or not likely.needed_s <= budget_s < p.needed_s:
        return None
    left, give = _budget_words(p, budget_s, timing_s)
    return (f"[sweep] successive halving kept full fine-tuning past epoch {{epoch}}, the first line's second case: "
            f"--budget={given or left} {_decides(p.reached)} (about {_minutes(p.spent_s)}); for an "
            f"answer over all, run this command again with --budget={give} when it ends (it goes on from its runs)")


def _budget_words(p: Plan, budget_s: float, timing_s: float) -> tuple:
    """`(left, give)`: the budget left after the probe, and the one to give for all, with the room a plan may fall
    short by (`PLAN_SHORTFALL`) and what the probe took (`timing_s`)."""
    return _minutes(budget_s), _minutes(p.needed_s * (1 + PLAN_SHORTFALL) + timing_s, up=True)


def _minutes(seconds: float, up: bool = False) -> str:
    minutes = math.ceil(seconds / 60) if up else max(round(seconds / 60), 1)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
