"""Pieces the benchmark scripts share: the replies they speak and how they report.

Benchmarks are scripts (``python -m bench NAME``), so this sits beside them, not in voicews.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
from pathlib import Path
from typing import Any

import voicews

REPLIES: tuple[str, ...] = (
    "Sure, I can help with that. Your order #48213 shipped on March 3 and should arrive in "
    "2 to 3 business days. If it has not shown up by Friday, let me know, e.g. by replying "
    "here, and I will open a ticket right away.",
    "I have booked you with Dr. Patel for Tuesday at 10:30 a.m. The clinic is at 221 Baker "
    "St., on the second floor. Please arrive about 15 minutes early, and bring your "
    "insurance card.",
    "Good question. The total comes to $1,249.99, including tax and shipping. You can split "
    "it into 4 payments of approx. $312.50, with no interest.",
    "Right now it is 18 degrees and cloudy in Seattle. Later today there is a 60% chance of "
    "rain, so you may want an umbrella. Tomorrow looks better, with highs around 22 and "
    "plenty of sun.",
    "No problem, I moved your meeting with Mr. Chen to 3 p.m. on Thursday. I also sent an "
    "updated invite to all 6 attendees. Anything else?",
)
"""Agent-like replies for time to first audio (9 to 14 s of speech each)."""

CONVERSATION_REPLIES: tuple[str, ...] = (
    "Sure, I can help with that. Your order shipped on Monday and should arrive by Thursday.",
    "Good question. The total comes to forty dollars, including tax and shipping.",
    "I moved your meeting to three in the afternoon, and sent the new invite to everyone. "
    "Anything else?",
    "Right now it is 18 degrees and cloudy in Seattle. Later today there is a chance of rain.",
    "Okay, I found two flights that fit. The first one leaves at nine, the second at noon.",
    "Thanks for waiting. Your refund was approved, and it should show up within five days.",
)
"""Shorter replies for the concurrency sweep and the memory test (4 to 6 s of speech)."""

BURST_REPLIES: tuple[str, ...] = (
    "Of course. I checked your account, and the payment went through this morning, so you are "
    "all set for the month.",
    "Let me see. The next train to Boston leaves at a quarter past six, and it takes about "
    "four hours.",
    "That recipe needs two cups of flour, one egg and a pinch of salt. Bake it for twenty minutes.",
    "Sorry about that. I have cancelled the duplicate order, and you will get an email "
    "confirming it shortly.",
    "Your package is at the depot right now. The driver should bring it over between two and "
    "five today.",
    "Sure thing. I added milk, bread and coffee to your list, and set a reminder for Saturday "
    "morning.",
    "The museum is open until eight tonight. Tickets are twelve dollars, and children under "
    "six get in free.",
    "I found three hotels near the beach. The cheapest one has a pool and costs ninety dollars "
    "a night.",
)
"""Replies for the burst scenario (5 to 7 s of speech), held out: no warm-up speaks them."""

LISTENING_REPLIES: tuple[tuple[str, ...], ...] = (
    ("Hmm, let me check that for you.", "It looks like the 2:45 flight to Denver is delayed "
     "by about 40 minutes, so you should still make your connection."),
    ("You will need three things for the form: a photo ID, proof of address, such as a "
     "utility bill, and your account number, which starts with 7731.",),
    ("Okay.", "Preheat the oven to 200 degrees, mix the butter with the sugar until it is pale "
     "and fluffy, then fold in the flour a little at a time."),
    ("The quarterly report shows revenue of $4.2 million, up 12% from last year, while costs "
     "stayed almost flat at $3.1 million.",),
    ("Well, that depends on what you mean by fast.", "If you want the quickest route, take "
     "the highway; if you would rather avoid tolls, the coastal road adds about fifteen "
     "minutes but is much prettier."),
    ("Your new password needs at least 12 characters, including one number and one symbol.",
     "Should I send a reset link to the address ending in 4481?"),
    ("Sure!", "Here are your options: the basic plan at 9 dollars a month, the family plan at "
     "15, or the yearly plan, which works out cheaper if you stay for the whole year."),
    ("I understand that this has been frustrating, and I am sorry that the technician missed "
     "the visit on the 14th; I have moved it to Monday morning between eight and ten, and I "
     "added a note asking them to call you before they come.",),
)  # fmt: skip
"""Replies for listening continuity (``python -m bench continuity``), sentence by sentence:
numbers, a list, a short first sentence, long ones; held out, in no test or warm-up."""


def source_version() -> str:
    """The voicews code measured: git commit, plus a hash of uncommitted changes to it."""
    package = Path(voicews.__file__).resolve().parent

    def git(*cmd: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(package), *cmd], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        diff = git("diff", "HEAD", "--", ".")
    except (OSError, subprocess.CalledProcessError):
        return f"{package} (not in git)"
    if not diff:
        return commit
    return f"{commit} + uncommitted changes {hashlib.sha1(diff.encode()).hexdigest()[:8]}"


def json_safe(value: Any) -> Any:
    """NaN (no data) is not JSON: make it null, recursively."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def rate_list(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive rates like 20,50: {text!r}")
    return values
