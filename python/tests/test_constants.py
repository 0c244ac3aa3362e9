"""The binding's enum constants against the library's own tables (kernels/op_tables.h,
read through gpucore_enum_name), so a constant copied into Python cannot drift from C."""
from gpucore import dtypes, nn, ops
from gpucore._lib import C


def c_names(enum_type):
    """[name of value 0, name of value 1, ...] of a public C enum."""
    out = []
    while True:
        n = C.gpucore_enum_name(enum_type.encode(), len(out))
        if n is None:
            return out
        out.append(n.decode())


def check_dict(py, enum_type, first=0):
    """Every C value has its name in py (aliases may be extra), with that value."""
    names = c_names(enum_type)
    assert names, enum_type
    for value, name in enumerate(names):
        if value < first:
            continue
        assert py.get(name) == value, "%s %s: C says %d, Python %r" % (enum_type, name, value, py.get(name))
    for name, value in py.items():
        assert 0 <= value < len(names), "%s: Python %s = %d is not a C value" % (enum_type, name, value)


def test_enum_name_query():
    assert C.gpucore_enum_name(b"gpucore_unary_op", 0) == b"exp"
    assert C.gpucore_enum_name(b"gpucore_unary_op", -1) is None
    assert C.gpucore_enum_name(b"gpucore_unary_op", 1 << 20) is None
    assert C.gpucore_enum_name(b"no_such_enum", 0) is None
    assert C.gpucore_enum_name(None, 0) is None


def test_op_constants_match_c():
    for value, name in enumerate(c_names("gpucore_binary_op")):
        assert getattr(ops, name.upper()) == value, name
    unary = c_names("gpucore_unary_op")
    for value, name in enumerate(unary):  # every C unary op has its constant and its function
        assert getattr(ops, name.upper()) == value, name
        assert callable(getattr(ops, name)) and name in ops.__all__, name
    check_dict(ops.ACTIVATIONS, "gpucore_activation")
    check_dict(ops.REDUCTIONS, "gpucore_reduction")
    check_dict(ops.LOSS_REDUCTIONS, "gpucore_loss_reduction")
    check_dict(nn.EPILOGUES, "gpucore_epilogue")


def test_dtypes_match_c():
    names = c_names("gpucore_dtype")
    assert [d.name for d in dtypes.all_dtypes()] == names
    for d in dtypes.all_dtypes():
        assert C.gpucore_dtype_name(d.value).decode() == d.name
        assert C.gpucore_dtype_size(d.value) == d.itemsize


def test_square_sample_op():
    import numpy as np
    import gpucore
    a = np.random.default_rng(3).standard_normal(37).astype(np.float32)
    r = gpucore.square(gpucore.tensor(a)).numpy()
    assert np.allclose(r.astype(np.float64), a.astype(np.float64) ** 2, rtol=1e-6, atol=0)
