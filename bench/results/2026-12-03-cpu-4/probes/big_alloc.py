"""big_alloc.py — CPU memory the machine does not have. An 8 GiB tensor, then gpucore.all(t)
(which makes two more 8 GiB results, queued, before any is written). Before ed1f216 the kernel
killed the process when the queued ops wrote them (on a 24 GiB machine); now the library says
OutOfMemoryError and stays usable. Run: GPUCORE_LIBRARY=... PYTHONPATH=python python3 big_alloc.py"""
import gpucore as g

t = g.zeros((2 ** 31,))
try:
    g.all(t).numpy()
    print("all: done (the machine had the memory)")
except g.OutOfMemoryError as e:
    print("all: OutOfMemoryError:", str(e)[:160], "...")
del t
print("still usable:", g.add(g.ones((3,)), g.ones((3,))).numpy())
