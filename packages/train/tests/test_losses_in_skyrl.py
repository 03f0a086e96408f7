"""Every installed tackroom loss lands in SkyRL's own PolicyLossRegistry and runs there with SkyRL's config."""

import torch
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
from skyrl.train.config.config import AlgorithmConfig

from tackroom_app import get_plugin_manager
from tackroom_train.losses import register_losses


def test_registered_under_their_names_and_callable_from_skyrl():
    names = register_losses()
    expected = {"tackroom_" + e.name for e in get_plugin_manager().entries("loss")}
    assert set(names) == expected and {"tackroom_dppo", "tackroom_ppo_clip", "tackroom_glm5"} <= expected
    assert expected <= set(PolicyLossRegistry.list_available())
    assert "dppo" in PolicyLossRegistry.list_available(), "SkyRL's own dppo stays"
    assert register_losses() == names, "registering twice replaces, it does not fail"

    torch.manual_seed(0)
    logp = torch.randn(2, 5, requires_grad=True)
    old = logp.detach() + 0.05 * torch.randn(2, 5)
    adv = torch.randn(2, 5)
    mask = torch.ones(2, 5)
    config = AlgorithmConfig(policy_loss_type="tackroom_dppo", loss_reduction="token_mean")
    loss, metrics = PolicyLossRegistry.get("tackroom_dppo")(logp, old, adv, config, mask, old)
    loss.backward()
    assert torch.isfinite(loss) and logp.grad is not None and logp.grad.abs().sum() > 0
    assert metrics and all(type(v) is float for v in metrics.values()), metrics
