"""MLX Kokoro's operations and host round trips per second of audio: a baseline checkout (as
shipped) against this one, and its speed on this machine's MLX device, side by side.

The device-independent measure of issue 33 (on a GPU every operation is a kernel to dispatch),
as ``mlx_ops`` counts it for MLX Piper: the lazy graph handed to each evaluation, walked with
``mx.export_to_dot``, before fusion (``mx.compile`` disabled), with MLX's own convolutions (a
GPU's; ``--conv matmul`` counts the CPU's matmul per tap). Per sentence:

- by component (ALBERT, duration encoder, durations, F0 and energy, text encoder, decoder),
  each counted alone with its inputs evaluated;
- through ``MlxKokoroEngine.synthesize``: every evaluation (``mx.eval``, or ``np.array`` of a
  lazy array: a host round trip) and the operations of its graph;
- the decoder's operations per sentence where 1, 4, 16 or 64 copies of the sentence's first
  piece are decoded together (``Decoder.batch``, as the compute worker batches sessions), and
  its prosody's where 1, 4 or 16 are begun together (``Kokoro.prosodies``).

On MLX's CPU backend ``mx.fast.layer_norm`` is expanded into its parts (one node on a GPU):
``gpu graph`` counts each as one. Each checkout runs in its own process (``PYTHONPATH``).
With ``--time N``, rounds of one process per checkout (alternating which goes first), each
timing N syntheses of each ``--timed`` sentence: medians of CPU and wall seconds per audio
second.

    python -m bench mlx_kokoro_ops --baseline ../main                 # counts (~2 min)
    python -m bench mlx_kokoro_ops --baseline ../main --no-counts --time 3 --rounds 4
        # ~10 min on MLX's CPU backend (its RTF is ~5-10): "Hello there." timed by default
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

SENTENCES = {
    "short": "Hello there.",
    "reply": (
        "Sure, I can help with that. Your order shipped on Monday and should arrive in two to "
        "three business days."
    ),
    "long": (
        "Your flight to Denver leaves early tomorrow morning from gate twelve, so please arrive "
        "at the airport two hours before departure and keep your boarding pass ready."
    ),
}
COMPONENTS = ("albert", "duration_encoder", "durations", "f0_energy", "text_encoder", "decoder")


def engine(conv: str) -> Any:
    """The engine as served, with MLX's convolutions (``native``) or a matmul per tap."""
    from voicews.engines.kokoro.mlx_engine import MlxKokoroEngine
    from voicews.engines.kokoro.mlx_model import Kokoro
    from voicews.engines.kokoro.mlx_weights import load_weights

    built = MlxKokoroEngine()
    if conv != "default":
        from voicews.engines.kokoro.assets import model_path

        built.model = Kokoro(load_weights(model_path()), matmul=conv == "matmul")
    return built


def layer_norm_ops(weighted: bool) -> int:
    """Operations one ``mx.fast.layer_norm`` is in this device's graph (1 on a GPU), with a
    weight and bias or without (the instance norms: fewer operations expanded)."""
    import mlx.core as mx

    from bench.engines.measures import graph_ops

    x, w = mx.ones((4, 8)), mx.ones((8,))
    mx.eval(x, w)
    p = w if weighted else None
    return sum(graph_ops(mx.fast.layer_norm(x, p, p, 1e-5)).values())


def beyond_one_node(norms: Counter[bool]) -> int:
    """Operations the layer norms built (counted by whether they are weighted) are in this
    device's graph beyond one node each: what a GPU's graph does not have."""
    return sum(n * (layer_norm_ops(weighted) - 1) for weighted, n in norms.items())


@contextmanager
def norms_counted() -> Iterator[Counter[bool]]:
    """The layer norms built meanwhile, by whether they have a weight."""
    import mlx.core as mx

    norms: Counter[bool] = Counter()
    real_norm = mx.fast.layer_norm

    def norm_counted(x: Any, weight: Any = None, *args: Any, **kwargs: Any) -> Any:
        norms[weight is not None] += 1
        return real_norm(x, weight, *args, **kwargs)

    mx.fast.layer_norm = norm_counted
    try:
        yield norms
    finally:
        mx.fast.layer_norm = real_norm


@contextmanager
def counting(model: Any) -> Iterator[tuple[list[int], Counter[str], Counter[bool]]]:
    """Each evaluation's operations, their kinds, and the layer norms built meanwhile: through
    ``mx.eval`` and through ``np.array`` of a lazy array in the engine and model modules.
    ``model.decode``'s audio is counted, not computed (silence stands in for it): MLX's CPU
    ``conv1d``, a GPU's way counted here, would take minutes over a long sentence."""
    import mlx.core as mx
    import numpy as np

    from bench.engines.measures import graph_ops
    from voicews.engines.kokoro import mlx_engine, mlx_model

    evals: list[int] = []
    kinds: Counter[str] = Counter()
    real_eval, real_decode = mx.eval, model.decode

    def record(*arrays: mx.array) -> None:
        found = graph_ops(*arrays)
        if found:  # an evaluated array: no graph to run (the stand-in for the audio)
            evals.append(sum(found.values()))
            kinds.update(found)

    def decode_counted(*args: Any) -> mx.array:
        audio = real_decode(*args)
        record(audio)
        silence = mx.zeros(audio.shape, audio.dtype)
        real_eval(silence)
        return silence

    def eval_counted(*arrays: Any) -> None:
        flat = [a for a in arrays if isinstance(a, mx.array)]
        record(*flat, *(x for a in arrays if isinstance(a, (list, tuple)) for x in a))
        real_eval(*arrays)

    class Numpy:
        """``numpy`` as the engine sees it, counting each lazy array it is handed."""

        def __getattr__(self, name: str) -> Any:
            return getattr(np, name)

        def array(self, x: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(x, mx.array):
                record(x)
            return np.array(x, *args, **kwargs)

    mx.eval, model.decode = eval_counted, decode_counted
    for module in (mlx_engine, mlx_model):
        setattr(module, "np", Numpy())  # noqa: B010
    try:
        with norms_counted() as norms:
            yield evals, kinds, norms
    finally:
        mx.eval = real_eval
        del model.decode
        for module in (mlx_engine, mlx_model):
            setattr(module, "np", np)  # noqa: B010


def by_component(model: Any, text: str) -> dict[str, int]:
    """Operations per component, summed over the text's pieces, each with its inputs evaluated
    (``mlx_kokoro``'s order: what the engine evaluates in two graphs, cut at each component),
    each layer norm one node (a GPU's graph)."""
    import mlx.core as mx
    import numpy as np

    from bench.engines.measures import graph_ops
    from voicews.engines.kokoro.assets import DEFAULT_VOICE, load_voice, style
    from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize

    ops: Counter[str] = Counter()

    def add(name: str, out: Any, *, evaluate: bool = True) -> Any:
        arrays = out if isinstance(out, tuple) else (out,)
        ops[name] += sum(graph_ops(*arrays).values()) - beyond_one_node(norms)
        norms.clear()
        if evaluate:
            mx.eval(*arrays)
        return out

    pack = load_voice(DEFAULT_VOICE)
    with norms_counted() as norms:
        for phonemes in phonemize(text):
            tokens = [PAD, *tokenize(phonemes), PAD]
            row = mx.array(style(pack, len(tokens) - 2)[0])
            s, ids, p = row[128:], mx.array(tokens, dtype=mx.int32), model.predictor
            mx.eval(row, s, ids)
            bert = add("albert", model.bert(ids))
            features = add("duration_encoder", p.features(bert, s))
            durations = add("durations", p.durations(features))
            frames = np.maximum(np.round(np.array(durations)), 1).astype(np.int64)
            index = mx.array(np.repeat(np.arange(len(tokens)), frames).astype(np.int32))
            expanded = features[index]
            mx.eval(expanded)
            f0, n = add("f0_energy", p.f0_n(expanded, s))
            asr = add("text_encoder", model.text_encoder(ids))[index]
            mx.eval(asr, row[:128])
            add("decoder", model.decoder(asr, f0, n, row[:128]), evaluate=False)
    return dict(ops)


TOGETHER = (1, 4, 16, 64)
"""Sentences decoded together (``Decoder.batch``): the decoder's operations per sentence."""


def batched_decoder(model: Any, text: str) -> dict[int, int]:
    """The decoder's operations per sentence for ``text``'s first piece decoded with copies of
    itself (``TOGETHER``), each layer norm one node; none where the checkout has no batched
    decoder."""
    import mlx.core as mx

    from bench.engines.measures import graph_ops
    from voicews.engines.kokoro.assets import DEFAULT_VOICE, load_voice, style
    from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize

    if not hasattr(model.decoder, "batch"):
        return {}
    tokens = tokenize(phonemize(text)[0])
    row = mx.array(style(load_voice(DEFAULT_VOICE), len(tokens))[0])
    p = model.prosody([PAD, *tokens, PAD], row)
    mx.eval(p.asr, p.f0, p.n, row)
    out = {}
    with norms_counted() as norms:
        for n in TOGETHER:
            if n == 1:
                audio = [model.decoder(p.asr, p.f0, p.n, row[:128])]
            else:
                styles = mx.stack([row[:128]] * n)
                audio = model.decoder.batch([p.asr] * n, [p.f0] * n, [p.n] * n, styles)
            ops = sum(graph_ops(*audio).values()) - beyond_one_node(norms)
            norms.clear()
            out[n] = round(ops / n)
    return out


PROSODY_TOGETHER = (1, 4, 16)
"""Sentences begun together (``Kokoro.prosodies``): their durations are computed to count the
rest, and 64 copies of ALBERT take minutes on MLX's CPU backend."""


def batched_prosody(model: Any, text: str) -> dict[int, int]:
    """The prosody's operations per sentence (both of its evaluations: the durations, then
    the decoder's inputs) for ``text``'s first piece begun with copies of itself
    (``PROSODY_TOGETHER``), each layer norm one node; none where the checkout has no batched
    prosody."""
    import mlx.core as mx

    from voicews.engines.kokoro.assets import DEFAULT_VOICE, load_voice, style
    from voicews.engines.kokoro.mlx_engine import Sentence
    from voicews.engines.kokoro.phonemes import PAD, phonemize, tokenize

    if not hasattr(model, "prosodies"):
        return {}
    tokens = tokenize(phonemize(text)[0])
    row = mx.array(style(load_voice(DEFAULT_VOICE), len(tokens))[0])
    sentence = Sentence([PAD, *tokens, PAD], row, 1.0, None)
    mx.eval(row)
    out = {}
    for n in PROSODY_TOGETHER:
        with counting(model) as (evals, _, norms):
            if n == 1:
                made = [model.prosody(sentence.tokens, row)]
            else:
                made = model.prosodies([sentence] * n)
            mx.eval(*[x for p in made for x in (p.asr, p.f0, p.n)])
            out[n] = round((sum(evals) - beyond_one_node(norms)) / n)
    return out


def child_counts(conv: str) -> list[dict[str, Any]]:
    import mlx.core as mx

    from voicews.engines.base import SynthesisOptions, WordStarts

    tts = engine(conv)
    mx.disable_compile()  # compiled functions run as traced: operations before fusion
    rows = []
    list(tts.synthesize("Hi.", SynthesisOptions()))  # weights loaded before counting
    for label, text in SENTENCES.items():
        with counting(tts.model) as (evals, kinds, norms):
            audio = sum(
                len(a)
                for a in tts.synthesize(text, SynthesisOptions())
                if not isinstance(a, WordStarts)
            )
        seconds = audio / tts.sample_rate
        parts = by_component(tts.model, text)
        rows.append(
            {
                "sentence": label,
                "audio_s": round(seconds, 3),
                "evals": len(evals),
                "ops_per_eval": evals,
                "ops_per_audio_s": round(sum(evals) / seconds),
                "ops_per_audio_s_gpu_graph": round((sum(evals) - beyond_one_node(norms)) / seconds),
                "components_per_audio_s": {k: round(v / seconds) for k, v in parts.items()},
                "decoder_per_sentence_together": batched_decoder(tts.model, text),
                "prosody_per_sentence_together": batched_prosody(tts.model, text),
                "top_ops": kinds.most_common(6),
            }
        )
    return rows


def child_timing(repeats: int, labels: list[str]) -> dict[str, dict[str, float]]:
    """The engine as served on this machine's MLX device: medians of ``repeats`` syntheses."""
    from voicews.engines.base import SynthesisOptions, WordStarts

    tts = engine("default")
    list(tts.synthesize("Warming up.", SynthesisOptions()))
    out = {}
    for label in labels:
        text = SENTENCES[label]
        cpu, wall = [], []
        for _ in range(repeats):
            start, clock = time.perf_counter(), time.process_time()
            items = list(tts.synthesize(text, SynthesisOptions()))
            audio = sum(len(a) for a in items if not isinstance(a, WordStarts)) / tts.sample_rate
            cpu.append((time.process_time() - clock) / audio)
            wall.append((time.perf_counter() - start) / audio)
        out[label] = {"cpu_per_audio_s": statistics.median(cpu), "rtf": statistics.median(wall)}
    return out


def run_child(tree: Path, *args: str) -> Any:
    env = dict(os.environ, PYTHONPATH=str(tree))
    command = [sys.executable, str(Path(__file__).resolve()), "--child", *args]
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def component(name: str, row: dict[str, Any]) -> Any:
    return row["components_per_audio_s"][name]


def together(part: str, n: int, row: dict[str, Any]) -> Any:
    """``part``'s operations per sentence with ``n`` together (its first piece)."""
    return row.get(f"{part}_per_sentence_together", {}).get(str(n), "-")


def table(counts: dict[str, list[dict[str, Any]]]) -> None:
    """Operations per audio second, by component and in all, each checkout beside the other."""
    names = list(counts)
    print(f"{'sentence':9} {'audio':>6} {'per audio s':<18}" + "".join(f"{n:>12}" for n in names))
    for i, label in enumerate(SENTENCES):
        rows = [counts[n][i] for n in names]
        lines: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
            (c, partial(component, c)) for c in COMPONENTS
        ]
        lines += [
            ("ops (all evals)", lambda r: r["ops_per_audio_s"]),
            ("ops, gpu graph", lambda r: r["ops_per_audio_s_gpu_graph"]),
            ("evals", lambda r: round(r["evals"] / r["audio_s"], 2)),
        ]
        for n in PROSODY_TOGETHER:
            lines.append((f"prosody/piece, {n}x", partial(together, "prosody", n)))
        for n in TOGETHER:
            lines.append((f"decoder/piece, {n}x", partial(together, "decoder", n)))
        for j, (what, value) in enumerate(lines):
            head = f"{label:9} {rows[0]['audio_s']:5.2f}s" if j == 0 else " " * 16
            print(f"{head} {what:<18}" + "".join(f"{value(r):>12}" for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="the shipped checkout's root")
    parser.add_argument("--conv", choices=["native", "matmul", "default"], default="native")
    parser.add_argument("--time", type=int, default=0, help="timed syntheses per process")
    parser.add_argument(
        "--timed", nargs="+", choices=SENTENCES, default=["short"], help="sentences timed"
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--no-counts", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child_timing(args.time, args.timed) if args.time else child_counts(args.conv)
        print(json.dumps(result))
        return
    here = Path(__file__).resolve().parents[2]
    trees = {"shipped": args.baseline.resolve()} if args.baseline else {}
    trees["now"] = here
    report: dict[str, Any] = {"conv": args.conv, "trees": {k: str(v) for k, v in trees.items()}}
    if not args.no_counts:
        report["counts"] = {
            name: run_child(tree, "--conv", args.conv) for name, tree in trees.items()
        }
        table(report["counts"])
    if args.time:
        runs: dict[str, list[Any]] = {name: [] for name in trees}
        for round_ in range(args.rounds):
            order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
            for name, tree in order:
                runs[name].append(run_child(tree, "--time", str(args.time), "--timed", *args.timed))
                print(f"round {round_ + 1} {name}: {runs[name][-1]}", flush=True)
        report["timing"] = {}
        for name, rounds in runs.items():
            for label in args.timed:
                figures = {
                    key: statistics.median(r[label][key] for r in rounds)
                    for key in rounds[0][label]
                }
                report["timing"][f"{name} {label}"] = figures
                print(
                    f"{name:8} {label:6} CPU s per audio s {figures['cpu_per_audio_s']:.3f}, "
                    f"RTF {figures['rtf']:.3f} (medians of {args.rounds} processes x {args.time})"
                )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
