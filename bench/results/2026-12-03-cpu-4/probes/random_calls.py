"""random_calls.py SEED N — N random calls of the public gpucore functions (tensors of every dtype,
shape, stride and freed state, numbers, None, strings, shapes, wrong kinds of argument), the stream
synchronized every 50 calls. Every failure must be an exception; anything else than the expected
kinds is printed as OTHER; a crash or a kill shows as the exit status. The last call is on stderr.
Ends with "ok SEED" after checking the library still computes. Run with the library under test:
  GPUCORE_LIBRARY=build/src/libgpucore.so PYTHONPATH=python python3 random_calls.py 153 600
(with the ASan build: LD_PRELOAD of libasan and libubsan, ASAN_OPTIONS=detect_leaks=0)."""
import inspect
import random
import sys
import traceback

import numpy as np

import gpucore as g

seed = int(sys.argv[1]); n = int(sys.argv[2])
rng = random.Random(seed)
SKIP = {'debug_fail_raw_alloc','set_log_callback','device_alloc','configure_memory','set_memory_limit','pin_memory',
        'save_file','load_file','safe_open','save_checkpoint','load_checkpoint','set_per_process_memory_fraction',
        'profiler','comm_group','set_caching','empty_cache','set_log_level','validate_alloc_conf','manual_seed'}
names = [x for x in dir(g) if not x.startswith('_') and callable(getattr(g, x)) and not inspect.isclass(getattr(g, x)) and x not in SKIP]
dts = ['float32', 'bfloat16', 'float16', 'float64', 'int32', 'int64', 'uint8']
def rshape():
    k = rng.choice([0, 1, 1, 2, 2, 3, 4])
    return tuple(rng.choice([0, 1, 2, 3, 4, 5, 8]) for _ in range(k))
pool = []
def rtensor():
    if pool and rng.random() < 0.5:
        return rng.choice(pool)
    sh = rshape(); dt = rng.choice(dts)
    try:
        t = g.randn(sh).to(dt) if rng.random() < 0.7 else g.zeros(sh, dtype=dt)
        r = rng.random()
        if r < 0.15 and len(sh) >= 2: t = t.transpose(0, 1)
        elif r < 0.25 and len(sh) >= 1 and sh[0] > 1: t = t[::2]
        elif r < 0.3: t.free()
    except g.GpucoreError:
        t = g.randn((2, 3))
    pool.append(t)
    if len(pool) > 30: pool.pop(0)
    return t
def rarg():
    r = rng.random()
    if r < 0.55: return rtensor()
    if r < 0.65: return rng.choice([0, 1, -1, 2, 3, 2**31, -2**63, 2**64, 7])
    if r < 0.75: return rng.choice([0.0, 1.5, -2.0, float('nan'), float('inf'), 1e300])
    if r < 0.82: return None
    if r < 0.88: return rng.choice(['mean', 'sum', 'none', 'gelu', 'tanh', 'float32', 'cpu', 'x', ''])
    if r < 0.94: return rshape()
    return rng.choice([True, False, [1, 2], (0, -1), np.ones(3, dtype=np.float32)])
KW = ['dim', 'out', 'dtype', 'weight', 'bias', 'eps', 'reduction', 'keepdim', 'stride', 'padding', 'groups', 'is_causal', 'p', 'training', 'ignore_index', 'alpha', 'approximate']
for i in range(n):
    name = rng.choice(names); f = getattr(g, name)
    args = [rarg() for _ in range(rng.choice([0, 1, 2, 2, 3, 3, 4, 5]))]
    kw = {}
    if rng.random() < 0.4:
        for _ in range(rng.randint(1, 2)): kw[rng.choice(KW)] = rarg()
    sys.stderr.write("%d %s %s %s\n" % (i, name, [type(a).__name__ + (str(a.shape) + str(a.dtype) if isinstance(a, g.Tensor) and a._h is not None else '') for a in args], list(kw)))
    sys.stderr.flush()
    try:
        r = f(*args, **kw)
        if isinstance(r, g.Tensor) and rng.random() < 0.3: r.numpy()
        if isinstance(r, g.Tensor): pool.append(r)
    except (g.GpucoreError, TypeError, ValueError, IndexError, KeyError, OverflowError, NotImplementedError, AttributeError) as e:
        pass
    except Exception as e:
        print("OTHER", name, type(e).__name__, e); traceback.print_exc()
    if i % 50 == 0:
        try: g.default_context().synchronize()
        except g.GpucoreError: pass
g.default_context().synchronize()
x = g.add(g.ones((3,)), g.ones((3,))).numpy(); assert (x == 2).all()
print("ok", seed)
