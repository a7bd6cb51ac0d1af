"""Small tensor helpers shared by the models and the search."""
import torch


def pad_to(tensor, dim, size, left=False):
    """``tensor`` padded with zeros along ``dim`` to ``size`` (after it, or before it with ``left``)."""
    missing = size - tensor.size(dim)
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    zeros = tensor.new_zeros(shape)
    return torch.cat([zeros, tensor] if left else [tensor, zeros], dim)
