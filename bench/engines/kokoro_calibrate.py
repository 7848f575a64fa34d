"""Measure the activation ranges of Kokoro's static graph again, and ship them.

    python -m bench kokoro_calibrate            # ~3 min on 2 busy cores: writes the package's file
    python -m bench kokoro_calibrate --check    # compares, writes nothing

Runs every calibration sentence in every shipped voice through the model with its decoder's
convolutions in float (``voicews.engines.kokoro.graphs.calibrate``) and writes the ranges with
the model's sha256 to ``voicews/engines/kokoro/static_ranges.json``, which the static graph is
built from at first use. Run it when the model, the calibration sentences, the voices or the
quantized nodes change; then delete the cached static graph (``$VOICEWS_CACHE_DIR/kokoro/``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped ranges")
    args = parser.parse_args(argv)

    from voicews.engines.kokoro.assets import model_path
    from voicews.engines.kokoro.calibration import RANGES, shipped
    from voicews.engines.kokoro.graphs import calibrate

    started = time.perf_counter()
    measured = calibrate(model_path())
    print(f"measured {len(measured.tensors)} ranges in {time.perf_counter() - started:.0f} s")
    if not args.check:
        RANGES.write_text(measured.to_json(), encoding="utf-8")
        print(f"wrote {RANGES} ({RANGES.stat().st_size} bytes)")
        return 0
    ranges = shipped()
    same_model = ranges.model_sha256 == measured.model_sha256
    same_tensors = ranges.tensors.keys() == measured.tensors.keys()
    print(f"same model: {same_model}; same tensors: {same_tensors}")
    if not (same_model and same_tensors):
        return 1
    gaps = [
        abs(a - b)
        for k in ranges.tensors
        for bound in (0, 1)
        for a, b in zip(ranges.tensors[k][bound], measured.tensors[k][bound], strict=True)
    ]
    print(f"largest difference of a bound: {max(gaps):.3g}; identical: {not any(gaps)}")
    return 0 if max(gaps) <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
