"""A training method is one registration of four pieces: a method defined here, in the test, with only `name`, `title`,
`help` and `apply` trains through the GLUE trainer, a grid, the budgeted sweep and `experiments table` without any
other module knowing it (every other piece is `Method`'s default); one defined here with a setting of its own (its
config dataclass) brings the GLUE trainer that setting as a flag and a `config` entry; a method that forgets a
required piece, or breaks a piece's rule, is refused naming the piece."""

import dataclasses
import json
import re

import pytest

from conftest import run_module
from tf_transfer.core import settings as settings_lib
from tf_transfer.core.errors import TransferError
from tf_transfer.core.record_schema import Field, RecordMismatch
from tf_transfer.models import freezing, methods
from tf_transfer.models.methods.registry import Method, register


class LayerNormsOnly(Method):
    """Trains the LayerNorms (gamma and beta) of the blocks in scope and nothing else of them."""

    name = "layernorms"
    title = "LayerNorms only"
    help = "the LayerNorms of those blocks; the head"

    def apply(self, backbone, options, trainable_layers):
        blocks = list(backbone.transformer_layers)
        for block in blocks if trainable_layers == freezing.ALL else blocks[len(blocks) - trainable_layers:]:
            block.trainable = True
            for variable in block.weights:
                variable.trainable = variable.name in ("gamma", "beta")


class RecordedLayerNorms(LayerNormsOnly):
    """The same method, recording a key of its own in `summary.json`."""

    record_fields = (Field("layernorms", (dict,), "with --method=layernorms: `{blocks}`", required=False),)

    def summary_facts(self, options, backbone):
        return {"layernorms": {"blocks": len(backbone.transformer_layers)}}


@pytest.fixture
def layernorms():
    # The commands' flags are defined once per process, their defaults from the registry (--methods): defined before
    # the test's method registers, so that later tests (docs/flag_reference) see the built-in defaults.
    import tf_transfer.experiments  # noqa: F401

    register(LayerNormsOnly)
    yield methods.get("layernorms")
    methods.unregister("layernorms")


def test_a_method_that_forgets_a_piece_or_breaks_a_rule_is_refused_naming_it():
    forgetful = type("Forgetful", (Method,), {"name": "forgetful", "title": "forgetful", "help": "nothing"})
    with pytest.raises(TransferError, match=r"training method 'forgetful' has no 'apply' \(apply\(backbone"):
        register(forgetful)
    helpless = dataclasses.make_dataclass("HelplessConfig", [("stray_rank", int, dataclasses.field(default=8))],
                                          frozen=True)
    stray = type("Stray", (LayerNormsOnly,), {"name": "stray", "config": helpless})
    with pytest.raises(TransferError, match="training method 'stray': its 'config' has no help for 'stray_rank'"):
        register(stray)
    reasonless = type("Reasonless", (LayerNormsOnly,), {"name": "reasonless", "run_defaults": ({"lr": 1e-3}, "")})
    with pytest.raises(TransferError, match="training method 'reasonless': its 'run_defaults' must be a pair"):
        register(reasonless)
    assert not {"forgetful", "stray", "reasonless"} & set(methods.names())
    with pytest.raises(TransferError, match="--method='prompt' is not a training method: use one of freeze, lora"):
        methods.get("prompt")


def test_a_method_declares_the_keys_it_records_in_its_own_module():
    from tf_transfer.training import run_record

    register(RecordedLayerNorms)
    try:
        assert run_record.schema("glue").fields["layernorms"].meaning == "with --method=layernorms: `{blocks}`"
        recorded = {"method": "layernorms", "layernorms": {"blocks": 1}}
        assert not [why for why in run_record.schema("glue").problems(recorded) if "layernorms" in why]
        with pytest.raises(RecordMismatch, match="'layernorms' is a list, not dict"):
            run_record.check("glue", {**recorded, "layernorms": [1]}, "summary.json", resumed=True)
    finally:
        methods.unregister("layernorms")
    with pytest.raises(RecordMismatch, match="'layernorms' is not a key of the glue record"):
        run_record.check("glue", recorded, "summary.json", resumed=True)  # no registered method declares it


def test_a_method_registered_in_a_test_trains_through_the_trainer_a_grid_the_sweep_and_the_table(
        layernorms, tmp_path, glue_dir, one_block_preset, monkeypatch):
    from tf_transfer.studies import grid as studies
    from tf_transfer.studies.glue.glue_settings import GlueSettings
    from tf_transfer.studies.grid import Grid, Variant

    flagfile = tmp_path / "ln.flags"
    flagfile.write_text(f"--preset={one_block_preset}\n--batch_size=8\n--max_epochs=1\n--max_seq_length=32\n")
    grid = Grid(name="ln", paper="a test", flagfile=str(flagfile),
                axes={"task": ["rte"], "method": ["layernorms"], "trainable_layers": ["all"], "lr": [1e-2],
                      "seed": [0]}, variants={"paper": Variant()}, report=lambda *a: None)
    runs = grid.runs()
    for run in runs:
        run["data_dir"] = glue_dir
    runs_dir = str(tmp_path / "runs")

    def train(settings, folder):
        studies.train_run(grid, settings, folder)

    counts = studies.run_until_settled(grid, runs, runs_dir, train, log=print)
    assert counts["ran"] == 1 and counts["failed"] == 0, counts
    folder = studies.run_dir(runs_dir, grid, runs[0])
    assert "/layernorms_kall_lr0.01_bs8_" in folder  # the default part of the run name: the method's name
    summary = json.loads(open(f"{folder}/summary.json").read())
    assert summary["completed"] and summary["method"] == "layernorms"
    table = {row["part"]: row["trainable"] for row in summary["parameter_table"]}
    assert table["block_0"] == 2 * 2 * 16  # two LayerNorms of width 16, gamma and beta
    assert GlueSettings.from_dict({k: v for k, v in runs[0].items() if k != "part"}).to_dict() == summary["config"]
    again = studies.run_until_settled(grid, runs, runs_dir, train, log=lambda line: None)
    assert again["completed"] == 1 and again["ran"] == 0  # found as completed

    import sweep_fakes
    from tf_transfer.studies.sweep import sweep_plan

    monkeypatch.setattr(sweep_plan, "measure", sweep_fakes.measured)  # the sweep's plan is not what this checks
    swept = run_module("tf_transfer.experiments", "sweep", "--task=rte", f"--data_dir={glue_dir}",
                       f"--presets={one_block_preset}", "--methods=layernorms", "--lrs=1e-2", "--max_epochs=1",
                       "--max_seq_length=32", "--batch_size=8", "--sweep_top=1", "--sweep_seeds=1",
                       "--noisolate_runs", "--workers=1", f"--runs_dir={tmp_path / 'sweep'}", "--budget=10m")
    assert swept.returncode == 0, swept.stderr[-3000:]
    [sweep_dir] = (tmp_path / "sweep" / "sweep").glob("rte*")  # named after its settings
    # The default candidate: every block, at the rate given (the method's default rates otherwise).
    trial = json.loads((sweep_dir / "layernorms_kall_lr0.01" / "seed0" / "summary.json").read_text())
    assert trial["method"] == "layernorms" and trial["completed"]
    assert "| layernorms_kall_lr0.01 |" in (sweep_dir / "README.md").read_text()

    listed = run_module("tf_transfer.experiments", "table", str(tmp_path))
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert re.search(r"\|\s*layernorms\s*\|", listed.stdout), listed.stdout  # its `method` cell: the name


@dataclasses.dataclass(frozen=True, kw_only=True)
class BetasConfig:
    """The setting of the method below, as a method outside the package declares it."""

    betas_only: bool = settings_lib.setting(False, "--method=layernorm_parts: train the LayerNorms' betas alone, not "
                                                   "their gammas.")

    def __post_init__(self):
        settings_lib.check("betas_only", self.betas_only, ((lambda value: isinstance(value, bool)), "must be a bool"))


class LayerNormParts(Method):
    """The LayerNorms of the blocks in scope, their gammas only when `betas_only` is off."""

    name = "layernorm_parts"
    title = "LayerNorm parts"
    help = "the LayerNorms (or their betas) of those blocks; the head"
    config = BetasConfig

    def apply(self, backbone, options, trainable_layers):
        wanted = ("beta",) if options.betas_only else ("gamma", "beta")
        for block in backbone.transformer_layers:
            block.trainable = True
            for variable in block.weights:
                variable.trainable = variable.name in wanted


def test_a_method_registered_outside_the_package_brings_its_setting_to_the_glue_command(
        tmp_path, glue_dir, one_block_preset):
    from absl import flags

    import tf_transfer.bench as bench
    import tf_transfer.glue as glue
    import tf_transfer.stack as stack
    from tf_transfer.studies.glue.glue_settings import GlueSettings
    from tf_transfer.studies.stack.stack_settings import StackSettings

    before = list(GlueSettings(task="rte").to_dict().items())
    register(LayerNormParts)
    try:
        for settings_class, command in ((GlueSettings, glue), (StackSettings, stack)):  # stack: trained before it
            assert "betas_only" in settings_class.__dataclass_fields__ and "betas_only" in command.COMMAND_FLAGS
        assert "betas_only" in bench.COMMAND_FLAGS  # the benchmark takes the trainer's flags
        result = run_module("tf_transfer.glue", "--task=rte", f"--data_dir={glue_dir}", f"--preset={one_block_preset}",
                            "--method=layernorm_parts", "--betas_only", "--lr=1e-2", "--max_epochs=1",
                            "--batch_size=8", "--max_seq_length=16", "--max_train_examples=16",
                            f"--output_dir={tmp_path / 'run'}")
        assert result.returncode == 0, result.stderr[-3000:]
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["completed"] and summary["config"]["betas_only"] is True
        table = {row["part"]: row["trainable"] for row in summary["parameter_table"]}
        assert table["block_0"] == 2 * 16  # the betas of the block's two LayerNorms of width 16; with gammas: 64
        with pytest.raises(TransferError, match="--betas_only must be a bool, got 'yes'"):
            GlueSettings(task="rte", method="layernorm_parts", betas_only="yes")
    finally:
        methods.unregister("layernorm_parts")
    # Taken out again: no flag, setting or `config` entry of later runs in this process has it.
    for settings_class, command in ((GlueSettings, glue), (StackSettings, stack)):
        assert "betas_only" not in settings_class.__dataclass_fields__ and "betas_only" not in command.COMMAND_FLAGS
    assert "betas_only" not in flags.FLAGS and "betas_only" not in bench.COMMAND_FLAGS
    assert list(GlueSettings(task="rte").to_dict().items()) == before
