"""Small tensor helpers shared by the models and the search."""

import torch


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device``; from the host to a CUDA device through pinned memory, without a
    wait (a copy from pageable memory would wait for the device's queued work)."""
    if tensor.device == device:
        return tensor
    if device.type == "cuda" and tensor.device.type == "cpu":
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)


def corner(shape) -> tuple:
    """The index of a tensor of ``shape`` in the leading corner of a larger one."""
    return tuple(slice(0, size) for size in shape)


def pad_to(tensor, dim, size, left=False):
    """``tensor`` padded with zeros along ``dim`` to ``size`` (after it, or before it with
    ``left``)."""
    missing = size - tensor.size(dim)
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    zeros = tensor.new_zeros(shape)
    return torch.cat([zeros, tensor] if left else [tensor, zeros], dim)


def joined(tensors: list[torch.Tensor], dim: int, stack: bool = False) -> torch.Tensor:
    """``torch.cat(tensors, dim)`` (``torch.stack`` with ``stack``), but a single tensor as a view
    of itself: a decoding step of one position would launch a copy kernel for nothing."""
    if len(tensors) == 1:
        return tensors[0].unsqueeze(dim) if stack else tensors[0]
    return torch.stack(tensors, dim) if stack else torch.cat(tensors, dim)


def from_host(values: list, device, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """A tensor of the host values ``values`` (a list, or a list of equal lists) on ``device``,
    copied without a wait for the device."""
    return to_device(torch.tensor(values, dtype=dtype), torch.device(device))


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s values on the host, copied without a wait: from a CUDA device into pinned
    memory, whose values are there once the device's stream has done the copy (an event's
    ``synchronize``, or any later read of the device); elsewhere ``tensor`` itself."""
    if tensor.device.type != "cuda":
        return tensor
    copy = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    return copy.copy_(tensor, non_blocking=True)
