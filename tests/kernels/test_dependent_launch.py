"""The programmatic-dependent-launch contract of kernels/common/dependent_launch.cuh, checked
over the kernel sources (no GPU needed): every __global__ kernel that is not launched plainly
(<<<...>>>) is launched so that it may overlap its predecessor, so its body must wait for that
predecessor (StartAfterPredecessor() or WaitForPredecessor()). A kernel that forgot the wait
would read what the previous kernel is still writing: a race no test reliably catches."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels"
WAIT = re.compile(r"\b(StartAfterPredecessor|WaitForPredecessor)\s*\(\s*\)")
GLOBAL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\([^()]*\)\s*)?(\w+)\s*\(")


def kernel_bodies(text):
    """(name, body) of every __global__ function defined in `text`."""
    for m in GLOBAL.finditer(text):
        open_brace = text.find("{", m.end())
        semicolon = text.find(";", m.end())
        if open_brace < 0 or (0 <= semicolon < open_brace):
            continue  # a declaration
        depth, i = 0, open_brace
        while True:
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        yield m.group(1), text[open_brace : i + 1]


def violations(sources):
    """Kernels (from {path: text}) that may be launched dependently but never wait."""
    all_text = "\n".join(sources.values())
    bad = []
    for path, text in sources.items():
        for name, body in kernel_bodies(text):
            if WAIT.search(body):
                continue
            launched_plainly = re.search(r"\b" + name + r"\b(\s*<[^;<>]*>)?\s*<<<", all_text)
            if not launched_plainly:
                bad.append(f"{path}: {name}")
    return bad


def test_checker_finds_a_kernel_without_its_wait():
    good = "__global__ void A(P p) {\n  StartAfterPredecessor();\n  p.y[0] = 1;\n}\n"
    plain = "__global__ void B(P p) { p.y[0] = 1; }\nvoid L() { B<<<1, 1>>>(p); }\n"
    missing = "__global__ void __launch_bounds__(256) C(const P p) {\n  p.y[0] = p.x[0];\n}\n"
    assert violations({"a.cu": good, "b.cu": plain}) == []
    assert violations({"c.cu": missing}) == ["c.cu: C"]


def test_every_dependently_launched_kernel_waits_for_its_predecessor():
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(KERNELS.rglob("*.cu*"))}
    names = [n for text in sources.values() for n, _ in kernel_bodies(text)]
    assert len(names) >= 30, names  # the scan found the kernels
    assert violations(sources) == []
