"""How time grows: `optrace plan` over 10 -> 100 -> 1,000 operator trees, and
`optrace collect` over 1 -> 8 -> 64 ranks. Both should be linear; a least-squares line
through the points and its worst relative deviation show it.

Small operators (4 headers, ~1,100 lines) keep the 1,000-operator run affordable on two
cores. Each size runs in a fresh process; the figures are wall seconds from process
start to output written.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def linearity(xs: list[int], ys: list[float]) -> tuple[float, float, float]:
    """slope, intercept, worst |fit - y| / y over the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    intercept = my - slope * mx
    worst = max(abs(slope * x + intercept - y) / y for x, y in zip(xs, ys, strict=True))
    return slope, intercept, worst


def plan_scaling(sizes: list[int]) -> list[tuple[int, int, float]]:
    import random

    from forest import write_operator

    out = []
    with tempfile.TemporaryDirectory(prefix="optrace-scale-") as tmp:
        root = Path(tmp)
        (root / "optrace.toml").write_text("# scaling forest\n")
        rng = random.Random(11)
        ops: list[Path] = []
        lines = 0
        for size in sizes:
            while len(ops) < size:
                name = f"op_{len(ops):05d}"
                lines += write_operator(root, name, rng, headers=4)
                ops.append(root / name)
            seconds = timed([sys.executable, "-m", "optrace", "plan", *map(str, ops[:size]),
                             "--format", "json", "-o", str(root / "plan.json")])
            out.append((size, lines, seconds))
    return out


def collect_scaling(sizes: list[int], cores: int) -> list[tuple[int, float]]:
    from bench_collect import generate

    out = []
    with tempfile.TemporaryDirectory(prefix="optrace-scale-") as tmp:
        for size in sizes:
            data = Path(tmp) / f"r{size}"
            data.mkdir()
            generate(data, size, cores)
            out.append((size, timed([sys.executable, "-m", "optrace", "collect", str(data),
                                     "-o", str(data / "trace.json")])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--operators", default="10,100,1000")
    ap.add_argument("--ranks", default="1,8,64")
    ap.add_argument("--cores", type=int, default=24, help="cores per rank for the collect run")
    args = ap.parse_args()
    ops = [int(x) for x in args.operators.split(",")]
    ranks = [int(x) for x in args.ranks.split(",")]
    plan = plan_scaling(ops)
    coll = collect_scaling(ranks, args.cores)
    ps, pi, pw = linearity([n for n, _, _ in plan], [t for _, _, t in plan])
    cs, ci, cw = linearity([n for n, _ in coll], [t for _, t in coll])
    print("| scaling | sizes | seconds | fit: per unit + fixed | worst deviation from the line |")
    print("|---|---|---|---|---|")
    print(f"| plan, operators (~1,100 lines each) | {', '.join(str(n) for n, _, _ in plan)} | "
          f"{', '.join(f'{t:.1f}' for _, _, t in plan)} | {ps * 1000:.0f} ms/operator + {pi:.2f} s | "
          f"{pw * 100:.0f} % |")
    print(f"| collect, ranks ({args.cores} cores x ~1,000 records) | {', '.join(str(n) for n, _ in coll)} | "
          f"{', '.join(f'{t:.2f}' for _, t in coll)} | {cs * 1000:.0f} ms/rank + {ci:.2f} s | "
          f"{cw * 100:.0f} % |")


if __name__ == "__main__":
    main()
