"""Prometheus metrics of one API server (``GET /metrics``).

Gauges are computed from the state when scraped (nothing to keep in sync on the request
path); counters are the state's process-lifetime counters; the ``/batch`` latency histogram and
the rejection counter are observed by the routes.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from atroposlib.api.state import TrajectoryState

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _StateCollector(Collector):
    def __init__(self, get_state: Callable[[], TrajectoryState | None]):
        self._get_state = get_state

    def collect(self):
        state = self._get_state()
        if state is None:
            return
        health = state.health()
        gauges = [
            ("atropos_queue_groups", "Groups waiting in the queue.", health["queue_groups"]),
            ("atropos_queue_sequences", "Sequences waiting in the queue.", health["queue_sequences"]),
            (
                "atropos_buffered_sequences",
                "Sequences of partial groups waiting to be combined.",
                health["buffered_sequences"],
            ),
            (
                "atropos_waiting_sequences",
                "Sequences not yet served (queue, buffers, pending batches); the backpressure measure.",
                state.waiting_sequences,
            ),
            ("atropos_waiting_bytes", "Stored bytes not yet served.", state.waiting_bytes),
            ("atropos_pending_batches", "Formed batches not yet served.", health["pending_batches"]),
            (
                "atropos_unacked_batches",
                "Served batches kept until acknowledged.",
                health["unacked_batches"],
            ),
            ("atropos_current_step", "Trainer step counter.", health["current_step"]),
            ("atropos_registered_envs", "Registered environments.", health["envs"]),
            ("atropos_trainer_registered", "1 when a trainer is registered.", int(health["registered"])),
        ]
        for name, doc, value in gauges:
            yield GaugeMetricFamily(name, doc, value=value)
        counters = state.counters
        for name, doc, value in (
            ("atropos_groups_received", "Groups accepted by /scored_data(_list).", counters.groups_received),
            ("atropos_sequences_received", "Sequences accepted.", counters.sequences_received),
            (
                "atropos_batches_formed",
                "Batches formed (the step counter's increments).",
                counters.batches_formed,
            ),
            ("atropos_batches_served", "Batches served by /batch.", counters.batches_served),
            ("atropos_sequences_served", "Sequences served by /batch.", counters.sequences_served),
        ):
            yield CounterMetricFamily(name, doc, value=value)
        env_groups = CounterMetricFamily(
            "atropos_env_groups_received", "Groups accepted per env.", labels=["env_id", "env_name"]
        )
        env_sequences = CounterMetricFamily(
            "atropos_env_sequences_received", "Sequences accepted per env.", labels=["env_id", "env_name"]
        )
        env_score = GaugeMetricFamily(
            "atropos_env_mean_score",
            "Mean score of the accepted sequences per env.",
            labels=["env_id", "env_name"],
        )
        for env_id, stats in sorted(counters.per_env.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            if env_id is not None and 0 <= env_id < len(state.envs):
                labels = [str(env_id), state.envs[env_id].real_name]
            else:
                labels = ["none" if env_id is None else str(env_id), ""]
            env_groups.add_metric(labels, stats.groups)
            env_sequences.add_metric(labels, stats.sequences)
            if stats.score_count:
                env_score.add_metric(labels, stats.score_sum / stats.score_count)
        yield env_groups
        yield env_sequences
        yield env_score


class ApiMetrics:
    """The metrics registry of one app."""

    def __init__(self, get_state: Callable[[], TrajectoryState | None]):
        self.registry = CollectorRegistry()
        self.registry.register(_StateCollector(get_state))
        self.batch_latency = Histogram(
            "atropos_batch_latency_seconds",
            "Time to answer GET /batch with a batch.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
            registry=self.registry,
        )
        self.ingest_latency = Histogram(
            "atropos_ingest_latency_seconds",
            "Time to accept a /scored_data or /scored_data_list request.",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
            registry=self.registry,
        )
        self.rejected = Counter(
            "atropos_requests_rejected",
            "Requests answered with an error status, by reason.",
            labelnames=["reason"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
