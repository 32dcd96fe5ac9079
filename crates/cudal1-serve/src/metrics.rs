//! Prometheus metrics (`GET /metrics`): requests by route and status with their latency, reward
//! items by state and verdict, evaluations queued and answered from the cache, prompts made,
//! and the queue's jobs per state (read when scraped).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteOnly {
    pub route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabels {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

fn latency_histogram() -> Histogram {
    // 5 ms to ~2.7 minutes: long polls wait for evaluations.
    Histogram::new(exponential_buckets(0.005, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RouteLabels, Counter>,
    pub latency: Family<RouteOnly, Histogram, fn() -> Histogram>,
    pub items: Family<StateLabels, Counter>,
    pub verdicts: Family<VerdictLabels, Counter>,
    pub jobs_created: Counter,
    pub cached: Counter,
    pub prompts: Family<KindLabels, Counter>,
    pub queue: Family<StateLabels, Gauge>,
    /// OpenRLHF queries that did not contain their prompt (not scored).
    pub openrlhf_unmatched: Counter,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("cudal1");
        let requests = Family::<RouteLabels, Counter>::default();
        let latency = Family::<RouteOnly, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let items = Family::<StateLabels, Counter>::default();
        let verdicts = Family::<VerdictLabels, Counter>::default();
        let jobs_created = Counter::default();
        let cached = Counter::default();
        let prompts = Family::<KindLabels, Counter>::default();
        let queue = Family::<StateLabels, Gauge>::default();
        registry.register("http_requests", "HTTP requests by route and status", requests.clone());
        registry.register(
            "http_request_duration_seconds",
            "Time to answer a request, by route",
            latency.clone(),
        );
        registry.register("reward_items", "Reward items answered, by state", items.clone());
        registry.register(
            "reward_verdicts",
            "Reward items answered with a verdict, by verdict",
            verdicts.clone(),
        );
        registry.register("jobs_created", "Evaluation jobs queued (new task, code and settings, or one given up for want of workers and asked for again)", jobs_created.clone());
        registry.register(
            "reward_cached",
            "Reward items answered from an earlier evaluation",
            cached.clone(),
        );
        registry.register("prompts", "Prompts made, by kind", prompts.clone());
        registry.register(
            "queue_jobs",
            "Jobs in the queue, by state (when scraped)",
            queue.clone(),
        );
        let openrlhf_unmatched = Counter::default();
        registry.register(
            "openrlhf_unmatched_queries",
            "OpenRLHF queries that did not contain their prompt byte for byte, so were not scored (a tokenizer whose decode changes the prompt)",
            openrlhf_unmatched.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
            items,
            verdicts,
            jobs_created,
            cached,
            prompts,
            queue,
            openrlhf_unmatched,
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
