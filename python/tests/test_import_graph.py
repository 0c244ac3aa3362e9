"""`import gpucore` imports no module cyclically: read from the source (every module's import statements
that run when the module is imported, as a graph that must have no cycle) and watched in a fresh
interpreter (no module of the package asked for while it is still being imported). Both checks run
once more on a copy of the package with a cycle planted, and must name it. Tensor's operators and
methods are written in tensor.py: no other module sets an attribute of Tensor."""
import ast
import json
import os
import shutil
import subprocess
import sys

import pytest

import gpucore

PACKAGE_DIR = os.path.dirname(gpucore.__file__)


def _type_checking_only(node):
    """An `if TYPE_CHECKING:` block (never runs)."""
    t = node.test
    return isinstance(node, ast.If) and ((isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or
                                         (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"))


def _import_time_imports(tree):
    """The import statements that run when the module runs: everywhere but inside function bodies
    (class bodies run at import) and `if TYPE_CHECKING:` blocks."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or \
                (isinstance(node, ast.If) and _type_checking_only(node)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def import_graph(package_dir, package="gpucore"):
    """{module: the package's modules it imports when it is imported}. `from . import x` names module
    x when x is a module of the package, else the package itself (its __init__)."""
    modules = {package + ("" if f == "__init__.py" else "." + f[:-3])
               for f in os.listdir(package_dir) if f.endswith(".py")}
    graph = {}
    for m in modules:
        path = os.path.join(package_dir, "__init__.py" if m == package else m[len(package) + 1:] + ".py")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        edges = set()
        for node in _import_time_imports(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = package + ("." + base if base else "")  # one flat package: level 1 is it
                names = [base + "." + a.name if base + "." + a.name in modules else base for a in node.names]
            for n in names:
                while n and n not in modules and "." in n:
                    n = n.rsplit(".", 1)[0]
                if n in modules and n != m:
                    edges.add(n)
        graph[m] = edges
    return graph


def tensor_attributes_set_outside(package_dir):
    """["module.py:line", ...] where a module other than tensor.py sets an attribute of Tensor
    (Tensor.x = ..., setattr(Tensor, ...), also through a name bound to Tensor: T = Tensor)."""
    found = []
    for f in sorted(os.listdir(package_dir)):
        if not f.endswith(".py") or f == "tensor.py":
            continue
        with open(os.path.join(package_dir, f), encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), f)
        names = {"Tensor"} | {t.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                              and isinstance(node.value, ast.Name) and node.value.id == "Tensor"
                              for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            if any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in names
                   for t in targets) or \
                    (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                     and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in names):
                found.append("%s:%d" % (f, node.lineno))
    return found


def find_cycle(graph):
    """One cycle of the graph as a list [a, b, ..., a], or None."""
    state = {}  # 1: on the current path, 2: done

    def visit(m, path):
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state:
                c = visit(n, path)
                if c:
                    return c
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            c = visit(m, [])
            if c:
                return c
    return None


# Run in a fresh interpreter: each module of the package that starts running is on a stack until it
# has run; an import statement that asks for a module still on the stack (the package's __init__
# apart, which is the root of every import) is a cyclic import. Prints {"cycles", "modules", "error"}.
WATCH = r'''
import builtins, importlib.abc, importlib.util, json, sys
PKG = "gpucore"
running, cycles = [], []

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != PKG and not name.startswith(PKG + "."):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module
        def exec_module(module):
            running.append(name)
            try:
                run(module)
            finally:
                running.remove(name)
        spec.loader.exec_module = exec_module
        return spec

real_import = builtins.__import__

def watched_import(name, globals=None, locals=None, fromlist=(), level=0):
    if level and globals:
        pkg = globals.get("__package__") or ""
        base = pkg.rsplit(".", level - 1)[0] if level > 1 else pkg
        base = base + "." + name if name else base
    else:
        base = name
    asked = [base + "." + f for f in (fromlist or ()) if f != "*"]
    module = real_import(name, globals, locals, fromlist, level)
    targets = [a for a in asked if a in sys.modules]  # the names that are modules
    if len(targets) < len([f for f in (fromlist or ()) if f != "*"]) or not fromlist:
        targets.append(base)
    me = (globals or {}).get("__name__")
    for t in targets:
        if t in running and t != PKG and t != me:
            chain = running[running.index(t):]
            cycles.append(chain + ([] if chain[-1] == me else [me]) + [t])
    return module

builtins.__import__ = watched_import
sys.meta_path.insert(0, Watch())
error = None
try:
    import gpucore
except Exception as e:
    error = "%s: %s" % (type(e).__name__, e)
print(json.dumps({"cycles": cycles, "error": error,
                  "modules": sorted(m for m in sys.modules if m == PKG or m.startswith(PKG + "."))}))
'''


def watch_import(package_parent):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    r = subprocess.run([sys.executable, "-c", WATCH], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_module_level_imports_form_no_cycle():
    graph = import_graph(PACKAGE_DIR)
    assert "gpucore.tensor" in graph and "gpucore.ops" in graph["gpucore"]
    assert find_cycle(graph) is None, "modules import each other: " + " -> ".join(find_cycle(graph))


def test_tensor_operators_are_written_in_tensor_py():
    assert tensor_attributes_set_outside(PACKAGE_DIR) == []
    for name in ("__add__", "__rsub__", "__itruediv__", "__neg__", "__eq__", "__lt__", "__pow__", "__matmul__",
                 "astype", "float"):
        assert name in vars(gpucore.Tensor) and vars(gpucore.Tensor)[name].__module__ == "gpucore.tensor", name
    for name in ("exp", "sum", "softmax", "clamp", "max", "all", "matmul"):
        assert name in vars(gpucore.Tensor), name


def test_import_gpucore_in_a_fresh_interpreter_imports_no_module_cyclically():
    seen = watch_import(os.path.dirname(PACKAGE_DIR))
    assert seen["error"] is None, seen["error"]
    assert "gpucore.tensor" in seen["modules"] and "gpucore.ops" in seen["modules"]
    assert seen["cycles"] == [], "cyclic imports: %s" % seen["cycles"]


@pytest.mark.parametrize("planted", [
    "\nfrom .ops import cast as _planted  # noqa\n",  # at the end of tensor.py: the import still succeeds
])
def test_both_checks_name_a_planted_cycle(tmp_path, planted):
    copy = tmp_path / "gpucore"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "tensor.py", "a", encoding="utf-8") as f:
        f.write(planted)
    cycle = find_cycle(import_graph(str(copy)))
    assert cycle is not None and "gpucore.tensor" in cycle and "gpucore.ops" in cycle, cycle
    seen = watch_import(str(tmp_path))
    assert seen["error"] is None, seen["error"]
    assert any("gpucore.tensor" in c for c in seen["cycles"]), seen


def test_an_attribute_set_on_tensor_elsewhere_is_named(tmp_path):
    copy = tmp_path / "gpucore"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "ops_compose.py", "a", encoding="utf-8") as f:
        f.write("\nTensor.__xor__ = lambda self, other: ne(self, other)  # planted\n"
                "setattr(Tensor, \"planted\", eq)\n")
    lines = sum(1 for _ in open(copy / "ops_compose.py", encoding="utf-8"))
    assert tensor_attributes_set_outside(str(copy)) == ["ops_compose.py:%d" % (lines - 1),
                                                        "ops_compose.py:%d" % lines]
