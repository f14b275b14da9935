"""qlinear.distributed on CPU processes: two ranks over torch.distributed's gloo backend load their slices of
a fixture checkpoint and must give the one-process layer's output (column-parallel: the same values;
row-parallel: the same up to the order of the f32 additions). The NCCL run on two GPUs is the same code."""
import os
import tempfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import qlinear  # noqa: E402
from conftest import FIXTURES, rel_err  # noqa: E402

# Row-parallel slices of these compute the one-process layer: their activation scales never span ranks, or
# (INT8 per-token) come from the all-reduced row maxima through a kernel that takes pre-quantized input.
SCHEMES = ["w8a16-fp8", "w4a16-mxfp4", "w8a8-mxfp8", "w4a4-nvfp4", "w8a8-fp8-tensor", "w8a8-int8-static",
           "w8a8-int8-dynamic"]
M = 5


def _inputs(k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(M, k, generator=g).to(torch.bfloat16)


def _worker(rank, size, init_file, fixture, out_dir, reduce_dtype="f32"):
    from qlinear.distributed import load_parallel_linears
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=size)
    try:
        layers = load_parallel_linears(os.path.join(FIXTURES, fixture), device="cpu", reduce_dtype=reduce_dtype)
        for i, (name, mod) in enumerate(sorted(layers.items())):
            y = mod(_inputs(mod.in_features, 1000 + i)).float().numpy()
            np.save(os.path.join(out_dir, f"{rank}-{name}.npy"), y)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("fixture,reduce_dtype", [(s, "f32") for s in SCHEMES] + [("w4a16-mxfp4", "bf16")])
def test_two_ranks_give_the_one_process_layers(fixture, reduce_dtype):
    from qlinear.torch import QuantLinear
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(2, os.path.join(tmp, "init"), fixture, tmp, reduce_dtype), nprocs=2, join=True)
        model = qlinear.load_checkpoint(os.path.join(FIXTURES, fixture))
        names = sorted(l.name for l in model.layers)
        assert len(names) == 4
        for i, name in enumerate(names):
            layer = model.layer(name)
            want = QuantLinear(layer).forward(_inputs(layer.in_features, 1000 + i)).float().numpy()
            for rank in range(2):
                got = np.load(os.path.join(tmp, f"{rank}-{name}.npy"))
                assert got.shape == want.shape, (fixture, name)
                if layer.parallelism == "column":
                    np.testing.assert_array_equal(got, want, err_msg=f"{fixture} {name} rank {rank}")
                else:
                    # f32 partials: the same sum added in another order, so at most a few BF16 roundings flip
                    # (0.0 measured on every fixture; INT8 slices quantized with their own row maxima instead of
                    # the whole row's measured 8e-3). BF16 partials: each rounded before the sum (3e-3 measured).
                    bound = 1e-3 if reduce_dtype == "f32" else 5e-3
                    assert rel_err(got, want) < bound, (fixture, name, rank, rel_err(got, want))


def _fp8_per_token_worker(rank, size, init_file, out_dir):
    from qlinear.distributed import load_parallel_linears
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=size)
    try:
        load_parallel_linears(os.path.join(FIXTURES, "w8a8-fp8-channel"), device="cpu")
        message = "loaded"
    except qlinear.Error as e:
        message = str(e)
    finally:
        dist.destroy_process_group()
    with open(os.path.join(out_dir, f"{rank}.txt"), "w") as f:
        f.write(message)


def test_row_slices_with_per_token_scales_need_a_kernel_that_takes_them_pre_quantized():
    # FP8 per-token on this CPU: the row slice runs where its kernel takes pre-quantized FP8 activations, and is
    # refused naming the kernel where it quantizes dense input itself (the x86 FP8 kernels).
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_fp8_per_token_worker, args=(2, os.path.join(tmp, "init"), tmp), nprocs=2, join=True)
        row = next(l for l in qlinear.load_checkpoint(os.path.join(FIXTURES, "w8a8-fp8-channel"), tp_rank=0,
                                                      tp_size=2, out_dtype="f32").layers if l.parallelism == "row")
        row.process()
        key = row.kernel.input_quant_key(row.config)
        takes = key is not None and key == row.config.activation_key
        for rank in range(2):
            with open(os.path.join(tmp, f"{rank}.txt")) as f:
                message = f.read()
            if takes:
                assert message == "loaded", message
            else:
                assert "per-token dynamic activation scales" in message and row.kernel.name in message, message


def test_a_slice_of_another_group_size_is_refused():
    from qlinear.distributed import ParallelQuantLinear
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'init')}", rank=0, world_size=1)
        try:
            half = qlinear.load_checkpoint(os.path.join(FIXTURES, "w8a16-fp8"), tp_rank=0, tp_size=2,
                                           out_dtype="f32")
            with pytest.raises(qlinear.Error, match="slice 0 of 2.*rank 0 of 1"):
                ParallelQuantLinear(half.layers[0], device="cpu")
            whole = qlinear.load_checkpoint(os.path.join(FIXTURES, "w8a16-fp8"), out_dtype="bf16")
            row = next(l for l in whole.layers if l.parallelism == "row")
            with pytest.raises(qlinear.Error, match="out_dtype=\"f32\""):
                ParallelQuantLinear(row, device="cpu")
            with pytest.raises(qlinear.Error, match="reduce_dtype 'f16'"):
                ParallelQuantLinear(row, device="cpu", reduce_dtype="f16")
        finally:
            dist.destroy_process_group()
