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


def pad_to(tensor, dim, size, left=False):
    """``tensor`` padded with zeros along ``dim`` to ``size`` (after it, or before it with ``left``)."""
    missing = size - tensor.size(dim)
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    zeros = tensor.new_zeros(shape)
    return torch.cat([zeros, tensor] if left else [tensor, zeros], dim)
