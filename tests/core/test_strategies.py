"""`--distribution` names to strategies; without a TPU, `tpu` is one clear error (no network: no TPU name is set)."""

import pytest

from tf_transfer.core import strategies
from tf_transfer.core.errors import TransferError


def test_tpu_without_a_tpu_is_one_clear_error(monkeypatch):
    for variable in ("TPU_NAME", "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_CONFIG"):
        monkeypatch.delenv(variable, raising=False)  # with a name set, the resolver would ask the cloud
    with pytest.raises(TransferError, match=r"--distribution=tpu: no TPU found \(ValueError\); use default or mirrored"):
        strategies.make_strategy("tpu")


def test_unknown_distribution_names_the_choices():
    with pytest.raises(TransferError, match="use default, mirrored, multi_worker or tpu"):
        strategies.make_strategy("parameter_server")


def test_default_is_the_default_strategy():
    import tensorflow as tf

    assert strategies.make_strategy("default") is tf.distribute.get_strategy()


@pytest.mark.parametrize("tf_config, chief", [
    (None, True),
    ('{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}}', True),
    ('{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "task": {"type": "worker", "index": 1}}', False),
    ('{"cluster": {"chief": ["127.0.0.1:3"], "worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}',
     False),
    ('{"cluster": {"chief": ["127.0.0.1:3"], "worker": ["127.0.0.1:1"]}, "task": {"type": "chief", "index": 0}}',
     True),
])
def test_the_chief_is_known_from_tf_config_alone(monkeypatch, tf_config, chief):
    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    assert strategies.chief_by_tf_config() is chief
