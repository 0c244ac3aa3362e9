"""gpucore.models.TokenDataset over files numpy writes (np.save .npy, llm.c .bin): every batch
equals the windows it names, cut from the arrays in numpy; resume by seek; bad files raise
with the library's message."""
import os

import numpy as np
import pytest

import gpucore
from gpucore.models import TokenDataset


def write_llmc(path, tokens, version=1):
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, version, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2" if version == 1 else "<u4").tobytes())


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng()
    a = rng.integers(0, 50257, size=int(rng.integers(300, 400)), dtype=np.uint16)
    b = rng.integers(0, 2**31 - 1, size=int(rng.integers(200, 300)), dtype=np.int32)
    pa, pb = str(tmp_path / "a.bin"), str(tmp_path / "b.npy")
    write_llmc(pa, a)
    np.save(pb, b)
    return [pa, pb], [a.astype(np.int64), b.astype(np.int64)]


def windows_of(arrays, T):
    out = []
    for x in arrays:
        for j in range((len(x) - 1) // T):
            out.append(x[j * T: j * T + T + 1])
    return np.array(out)


@pytest.mark.parametrize("layout", ["shifted", "window"])
def test_batches_are_the_named_windows(files, layout):
    paths, arrays = files
    T, B = 9, 4
    wins = windows_of(arrays, T)
    ds = TokenDataset(paths, batch_size=B, seq_len=T, seed=3, layout=layout, device="cpu")
    assert ds.windows == len(wins) and ds.batches_per_epoch == len(wins) // B
    assert ds.tokens == sum(len(x) for x in arrays)
    for k in range(ds.batches_per_epoch + 2):
        w = ds.batch_windows(k)
        ids, lab = ds.next()
        assert (ds.epoch, ds.step) == divmod(k, ds.batches_per_epoch)
        ids, lab = ids.numpy(), lab.numpy()
        if layout == "shifted":
            np.testing.assert_array_equal(ids, wins[w][:, :T])
            np.testing.assert_array_equal(lab, wins[w][:, 1:])
        else:
            np.testing.assert_array_equal(ids, wins[w])
            np.testing.assert_array_equal(lab, wins[w])
    ds.close()


def test_seek_resumes_and_shards_are_disjoint(files):
    paths, _ = files
    a = TokenDataset(paths, 3, 5, seed=11, device="cpu")
    got = [a.next()[0].numpy() for _ in range(7)]
    b = TokenDataset(paths, 3, 5, seed=11, device="cpu")
    b.seek(4)
    assert b.position == 4
    for k in range(4, 7):
        np.testing.assert_array_equal(b.next()[0].numpy(), got[k])
    ranks = [TokenDataset(paths, 2, 5, seed=1, rank=r, world_size=2, device="cpu") for r in range(2)]
    n = ranks[0].batches_per_epoch
    seen = [set(np.concatenate([d.batch_windows(k) for k in range(n)]).tolist()) for d in ranks]
    assert not (seen[0] & seen[1]) and len(seen[0]) == len(seen[1]) == 2 * n


def test_bad_files_raise_with_message(tmp_path):
    p = str(tmp_path / "f.npy")
    np.save(p, np.arange(100, dtype=np.float32))
    with pytest.raises(gpucore.CorruptFileError, match="<f4"):
        TokenDataset(p, 2, 4, device="cpu")
    q = str(tmp_path / "t.bin")
    write_llmc(q, np.arange(100))
    with open(q, "r+b") as f:
        f.truncate(1024 + 150)
    with pytest.raises(gpucore.CorruptFileError, match="truncated"):
        TokenDataset(q, 2, 4, device="cpu")
    with pytest.raises(gpucore.InvalidArgumentError):
        TokenDataset(str(tmp_path / "f.npy"), 2, 4, layout="diagonal", device="cpu")


def test_write_is_llmc_format(tmp_path):
    """gpucore_token_data_write: byte for byte the file write_llmc (llm.c's write_datafile layout) makes, version 1
    below 65536 and version 2 from there, read back by TokenDataset; bad tokens and paths refused, nothing left."""
    from gpucore._lib import C
    rng = np.random.default_rng()
    small = rng.integers(0, 65536, size=int(rng.integers(100, 200)))
    big = np.concatenate([small, [65535, 65536]])  # the smallest file of version 2
    for toks, version in ((small, 1), (big, 2)):
        arr = np.ascontiguousarray(toks, dtype=np.int32)
        p, ref = str(tmp_path / ("w%d.bin" % version)), str(tmp_path / ("r%d.bin" % version))
        C.gpucore_token_data_write(p.encode(), arr.ctypes.data, len(arr))
        write_llmc(ref, toks, version)
        with open(p, "rb") as f, open(ref, "rb") as g:
            assert f.read() == g.read()
        ds = TokenDataset([p], batch_size=1, seq_len=len(arr) - 1, device="cpu")
        x, y = ds.next()
        np.testing.assert_array_equal(np.concatenate([x.numpy()[0], y.numpy()[0, -1:]]), arr)
    bad = np.array([3, -1, 4], dtype=np.int32)
    with pytest.raises(gpucore.InvalidArgumentError, match="token 1 is -1"):
        C.gpucore_token_data_write(str(tmp_path / "bad.bin").encode(), bad.ctypes.data, 3)
    with pytest.raises(gpucore.FileIOError, match="no-such-dir"):
        C.gpucore_token_data_write(str(tmp_path / "no-such-dir" / "x.bin").encode(), bad.ctypes.data, 1)
    assert sorted(os.listdir(tmp_path)) == ["r1.bin", "r2.bin", "w1.bin", "w2.bin"]
