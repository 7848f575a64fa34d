"""What text normalization adds per segment, on this CPU: voicews.text against the libraries
the issue weighed (gruut, NVIDIA NeMo text processing), side by side in one run, rounds
interleaved, p50/p95 over every sentence of every round.

```sh
python -m bench normalize_cost                          # voicews.text alone
python -m bench normalize_cost --with gruut,nemo --nemo-cache /tmp/nemo_cache --show
```

gruut and NeMo are not dependencies: install them (NeMo needs pynini) in a throwaway venv
with num2words, and run this from there with the checkout on PYTHONPATH. The first NeMo run
builds its grammars into ``--nemo-cache`` (minutes); later runs load them.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from statistics import median

AGENT_TEXTS = [
    "Your total comes to $1,234.56, and it was charged today.",
    "You can reach our support line at 555-123-4567 any time.",
    "Your appointment is on 12/05/2026 at 3:30 PM.",
    "Order #48213 ships on Tue, Dec 3rd.",
    "It's 72°F in Miami and -5°C in Oslo right now.",
    "Take 2.5 mg twice a day; the clinic is 300 km away.",
    "Dr. Patel will see you at the St. Louis office.",
    "We grew 3x to 1.5M users, up from 800K last year.",
    "Support is available 24/7, and replies take 5-10 min.",
    "The ticket costs €20, or £15.99 if you book early.",
    "The company was founded in 1999.",
    "Your 3rd payment of $49.99 is due on the 21st.",
    "Only 50% of the seats are left, so book soon.",
    "Send the signed form to jane.doe@example.com by Friday.",
    "Your confirmation code is A7X-92B.",
    "Your flight departs at 14:05 from gate B12.",
    "The startup raised $2.5M in 2026 and hired 12 engineers.",
    "Our new office is at 221 Baker St. near the station.",
    "Bring a photo ID, e.g. a passport, and arrive by 10 a.m.",
]
"""The issue's table as an agent says it: each class in a sentence (also the golden set's)."""

PLAIN_TEXTS = [
    "Sure, I can help with that.",
    "Your flight to Denver leaves early tomorrow morning, so please arrive on time.",
    "The weather today is mostly sunny, with a light breeze in the afternoon.",
    "I have updated your booking and sent a confirmation to your email.",
    "Is there anything else I can do for you today?",
    "Let me check that for you, it will only take a moment.",
]
"""No digit, no symbol: the fast path, what most of a reply is."""

Normalizer = Callable[[str], str]


def voicews_text() -> Normalizer:
    from voicews.text import normalize

    return normalize


def voicews_cold() -> Normalizer:
    """The same with num2words' readings uncached: every number new, the worst case."""
    from voicews.text import normalize, numbers

    def run(text: str) -> str:
        numbers.cardinal.cache_clear()
        numbers.ordinal.cache_clear()
        return normalize(text)

    return run


def voicews_streamed() -> Normalizer:
    """The same, as the session will run it: 4-character deltas, pieces as they come."""
    from voicews.text import StreamNormalizer

    def run(text: str) -> str:
        stream = StreamNormalizer()
        pieces = [p for k in range(0, len(text), 4) for p in stream.push(text[k : k + 4])]
        return "".join(p.spoken for p in [*pieces, *stream.flush()])

    return run


def gruut() -> Normalizer:
    from gruut import sentences

    def run(text: str) -> str:
        return " ".join(w.text for s in sentences(text, lang="en-us") for w in s.words)

    return run


def nemo(cache: str | None) -> Normalizer:
    from nemo_text_processing.text_normalization.normalize import Normalizer as Nemo

    normalizer = Nemo(input_case="cased", lang="en", cache_dir=cache)
    return lambda text: str(normalizer.normalize(text, punct_post_process=True))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with", dest="others", default="", help="gruut,nemo")
    parser.add_argument("--nemo-cache", default=None, help="NeMo's grammar cache folder")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--show", action="store_true", help="print each agent sentence's reading")
    args = parser.parse_args()

    builders: dict[str, Callable[[], Normalizer]] = {
        "voicews.text": voicews_text,
        "voicews.text cold": voicews_cold,
        "voicews.text streamed": voicews_streamed,
        "gruut": gruut,
        "nemo": lambda: nemo(args.nemo_cache),
    }
    names = [
        "voicews.text",
        "voicews.text cold",
        "voicews.text streamed",
        *filter(None, args.others.split(",")),
    ]
    candidates: dict[str, Normalizer] = {}
    for name in names:
        start = time.perf_counter()
        candidates[name] = builders[name]()
        candidates[name]("warm up: 12 at 3:30 PM.")
        print(f"{name}: import and setup {time.perf_counter() - start:.2f} s")

    times: dict[tuple[str, str], list[float]] = {
        (n, s): [] for n in names for s in ("agent", "plain")
    }
    for _ in range(args.rounds):
        for kind, texts in (("agent", AGENT_TEXTS), ("plain", PLAIN_TEXTS)):
            for text in texts:
                for name, run in candidates.items():
                    gc.collect()  # each pays for its own garbage, not the last one's
                    start = time.perf_counter()
                    run(text)
                    times[name, kind].append(time.perf_counter() - start)

    print(
        f"\nms per segment, {args.rounds} rounds interleaved "
        f"({len(AGENT_TEXTS)} agent sentences, {len(PLAIN_TEXTS)} plain ones):"
    )
    print(
        f"{'normalizer':24} {'agent p50':>10} {'agent p95':>10} {'plain p50':>10} {'plain p95':>10}"
    )
    for name in names:
        agent, plain = times[name, "agent"], times[name, "plain"]
        print(
            f"{name:24} {median(agent) * 1e3:10.3f} {percentile(agent, 0.95) * 1e3:10.3f} "
            f"{median(plain) * 1e3:10.3f} {percentile(plain, 0.95) * 1e3:10.3f}"
        )
    if args.show:
        for text in AGENT_TEXTS:
            print(f"\n{text}")
            for name in names:
                print(f"  {name:22} {candidates[name](text)}")


if __name__ == "__main__":
    main()
