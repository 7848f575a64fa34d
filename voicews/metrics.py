"""Prometheus metrics, one registry per app so several servers can share a process."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .compute.stats import WorkerFigures
from .compute.worker import Worker
from .core.session import Session


class Metrics:
    def __init__(self, worker: Worker, sessions: dict[str, Session]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sessions_opened = Counter("voicews_sessions_opened", "Sessions accepted", registry=r)
        self.sessions_refused = Counter(
            "voicews_sessions_refused", "Connections refused, by reason", ["reason"], registry=r
        )
        self.sessions_lost = Counter(
            "voicews_sessions_lost",
            "Sessions whose peer went away without a closing handshake (reset, keepalive "
            "timeout, a write that failed); each freed its slot",
            registry=r,
        )
        self.connections_dropped = Counter(
            "voicews_connections_dropped",
            "Connections closed for breaking a bound: over the cap, a head (or Wyoming event) "
            "too slow, invalid framing",
            ["reason"],
            registry=r,
        )
        self.turns = Counter("voicews_turns", "Turns ended, by outcome", ["outcome"], registry=r)
        self.errors = Counter("voicews_errors", "Error events sent, by code", ["code"], registry=r)
        self.trials = Counter(
            "voicews_first_word_trials",
            "Turns' first words synthesized on trial before the next token confirmed them (the "
            "worker idle), by outcome: confirmed, or dropped (the word grew, or text stopped)",
            ["outcome"],
            registry=r,
        )
        self.first_audio = Histogram(
            "voicews_first_audio_seconds",
            "First text delta to first audio frame sent, per turn",
            buckets=(0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0),
            registry=r,
        )
        self.stalls = Histogram(
            "voicews_stall_seconds",
            "Silences a real-time listener would hear after the first audio",
            buckets=(0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0),
            registry=r,
        )
        self.http_speech = Counter(
            "voicews_http_speech_requests", "POST /v1/audio/speech requests", registry=r
        )
        Gauge("voicews_sessions_active", "Open sessions", registry=r).set_function(
            lambda: len(sessions)
        )
        self._connections = Gauge(
            "voicews_connections_open", "Open connections, HTTP, WebSocket and Wyoming", registry=r
        )
        Gauge(
            "voicews_pending_audio_seconds", "Audio queued for sockets, all sessions", registry=r
        ).set_function(lambda: sum(s.pending_audio_s for s in sessions.values()))
        r.register(_WorkerGauges(worker.figures))

    def track_connections(self, count: Callable[[], int]) -> None:
        """The transport knows its open connections; the app does not."""
        self._connections.set_function(count)

    def observe(self, session: Session) -> None:
        """Move what a session recorded since the last call into the metrics."""
        stats = session.stats
        for seconds in stats.first_audio:
            self.first_audio.observe(seconds)
        for seconds in stats.stalls:
            self.stalls.observe(seconds)
        for outcome in stats.turns:
            self.turns.labels(outcome).inc()
        for code in stats.errors:
            self.errors.labels(code).inc()
        for outcome in stats.trials:
            self.trials.labels(outcome).inc()
        stats.first_audio.clear()
        stats.stalls.clear()
        stats.turns.clear()
        stats.errors.clear()
        stats.trials.clear()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


_WORKER_GAUGES = (
    ("voicews_worker_queue_depth", "Jobs waiting for the worker", "queued"),
    (
        "voicews_worker_busy_ratio",
        "Share of the compute lanes' time in the last 10 s spent computing",
        "busy_ratio",
    ),
    (
        "voicews_worker_late_ratio",
        "Share of segments in the last 10 s whose first audio came after their listener ran "
        "dry, though asked for in time",
        "late_ratio",
    ),
    ("voicews_worker_batches", "Batched decoder steps so far (MLX engines)", "batches"),
    ("voicews_worker_batched_windows", "Windows those steps decoded", "batched_windows"),
    ("voicews_worker_largest_batch", "Most windows one step decoded", "largest_batch"),
    (
        "voicews_worker_begun_batches",
        "Host steps that began several sentences together (MLX engines)",
        "begun_batches",
    ),
    ("voicews_worker_begun_sentences", "Sentences those steps began", "begun_sentences"),
    (
        "voicews_worker_phrase_hits",
        "First segments given again from the kept ones, without compute",
        "phrase_hits",
    ),
    ("voicews_worker_phrases_kept", "First segments kept", "phrases_kept"),
    (
        "voicews_worker_warming",
        "1 while the engine warms up before serving (also /readyz 503)",
        "warming",
    ),
    (
        "voicews_overloaded",
        "1 while the compute worker is past what it can keep smooth (also /readyz 503)",
        "overloaded",
    ),
)
"""Each gauge of the worker: its name, its help, the ``WorkerFigures`` field it shows."""


class _WorkerGauges(Collector):
    """The worker's gauges from one reading of its figures a scrape: a gauge each reading
    them computed every figure (the lanes' busy share, the late segments) once a gauge."""

    def __init__(self, figures: Callable[[], WorkerFigures]) -> None:
        self._figures = figures

    def collect(self) -> Iterator[GaugeMetricFamily]:
        figures = self._figures()
        for name, help_text, field in _WORKER_GAUGES:
            yield GaugeMetricFamily(name, help_text, value=float(getattr(figures, field)))
