"""Run every tests/bench/bench_*.py module, print the figures, write bench-results.json.

Each module exposes ``run() -> list[dict]``; a module that fails is reported and the
others still run (the exit code is then 1). A figure that is not built is absent, never
faked.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    # The benches build large synthetic policies on purpose; their lint warnings are noise.
    logging.basicConfig(level=logging.ERROR)
    only = set(sys.argv[1:])
    figures: list[dict[str, object]] = []
    failed = []
    for path in sorted(Path(__file__).parent.glob("bench_*.py")):
        if only and path.stem not in only:
            continue
        t0 = time.perf_counter()
        print(f"== {path.stem}", flush=True)
        try:
            module = importlib.import_module(f"tests.bench.{path.stem}")
            got = module.run()
        except Exception:
            traceback.print_exc()
            failed.append(path.stem)
            continue
        for f in got:
            ratio = f"  ratio {f['ratio']}" if f.get("ratio") is not None else ""
            base = f"  baseline {f['baseline']}" if f.get("baseline") is not None else ""
            print(
                f"  {f['id']:<8} {f['name']}: {f['value']} {f['unit']}{base}{ratio}"
                f"  (target {f['target']})"
            )
        figures.extend(got)
        print(f"   ({time.perf_counter() - t0:.1f}s)", flush=True)
    figures.sort(key=lambda f: str(f["id"]))
    out = ROOT / "bench-results.json"
    out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"wrote {out} ({len(figures)} figures)")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
