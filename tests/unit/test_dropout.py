"""models/dropout.py: the keep rate, the scale, the gradient, the seed, and eval mode."""

import torch

from onmt_lite.models.dropout import Dropout, dropout


def test_about_one_minus_p_is_kept_and_kept_values_are_scaled_by_its_inverse():
    x = torch.randn(1000, 1000)
    y = dropout(x, 0.1)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.002
    torch.testing.assert_close(y[kept], x[kept] * (65536 / 58982))
    assert abs(dropout(torch.ones(1000, 1000), 0.3).mean().item() - 1.0) < 0.005  # unbiased


def test_the_gradient_is_the_mask_times_the_scale():
    x = torch.randn(50, 40, requires_grad=True)
    y = dropout(x, 0.5)
    y.sum().backward()
    expected = (y != 0).float() * (65536 / 32768)
    assert torch.equal(x.grad, expected)


def test_the_seed_fixes_the_masks_and_eval_mode_is_the_identity():
    x = torch.randn(7, 9)
    torch.manual_seed(3)
    first = dropout(x, 0.2)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.2), first)
    assert not torch.equal(dropout(x, 0.2), first)
    module = Dropout(0.4).eval()
    assert module(x) is x and dropout(x, 0.0) is x
    assert Dropout(0.4).train()(torch.ones(3, 5)).dtype == torch.float32


def test_relu_dropout_equals_dropout_of_relu_in_values_draws_and_gradient():
    from onmt_lite.models.dropout import relu_dropout

    x = torch.randn(60, 70, dtype=torch.float64)
    x[0, :5] = 0.0  # the ReLU's gradient at 0 is 0 in both
    upstream = torch.randn(60, 70, dtype=torch.float64)
    results = []
    for fused in (False, True):
        leaf = x.clone().requires_grad_()
        torch.manual_seed(4)
        y = relu_dropout(leaf, 0.3) if fused else dropout(torch.relu(leaf), 0.3)
        (y * upstream).sum().backward()
        results.append((y.detach(), leaf.grad))
    (expected, expected_grad), (actual, actual_grad) = results
    assert torch.equal(actual, expected) and torch.equal(actual_grad, expected_grad)
    assert (expected == 0).any() and (expected_grad != 0).any()
    assert torch.equal(relu_dropout(x, 0.3, training=False), torch.relu(x))
