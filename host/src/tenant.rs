//! Who a request runs as ([`Principal`]), and the weighted fair queueing that the schedulers use
//! to share a model's queue among them ([`Shares`]).
//!
//! A principal is set where a request enters: a door that identified a tenant (`crate::tenancy`),
//! or a door that read `x-gateway-inference-fairness-id` from a request without a tenant. It
//! travels with the request ([`crate::infer::InferRequest::principal`], then
//! `ExecRequest::principal`), to the BLS calls and ensemble steps the request makes, so a
//! scheduler queues each request under its own flow without looking anything up.
//!
//! Fairness: every flow (a tenant, a fairness id, or the one flow of requests with neither) has a
//! virtual time, the service it has had divided by its weight. The next request a queue serves
//! comes from the backlogged flow with the least virtual time; within a flow, the queue's own
//! order holds (Triton's priority levels, then arrival). A flow that was idle starts again at the
//! queue's current virtual time, so idling banks no credit. With one flow this is plain FIFO.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A flow's name in a queue: the tenant's name, `fairness:<id>`, or empty (no principal).
pub type FlowKey = Arc<str>;

/// The identity and rights a request carries.
#[derive(Debug)]
pub struct Principal {
    /// The tenant's name, or `fairness:<id>` for a request that named only a fairness id.
    pub flow: FlowKey,
    /// Share of a queue against other flows (at least 1).
    pub weight: u32,
    /// The models this principal may call (`None`: every model; fairness ids have no rights).
    pub models: Option<Arc<ModelRules>>,
    /// Per-tenant counters (`None` for fairness ids, which would make series without bound).
    pub counters: Option<Arc<TenantCounters>>,
}

impl Principal {
    /// A principal for a request that named a fairness id and no tenant.
    pub fn fairness(id: &str) -> Self {
        Self { flow: format!("fairness:{id}").into(), weight: 1, models: None, counters: None }
    }

    /// Whether this principal may call (or see) `model`.
    pub fn may_call(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|rules| rules.matches(model))
    }

    /// Records time a request of this principal waited in a model's queue.
    pub fn record_queue(&self, waited: Duration) {
        if let Some(counters) = &self.counters {
            counters.queue_us.fetch_add(u64::try_from(waited.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
            counters.queued.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What marks a hidden model's name (see [`visible_name`]): no model name can contain it.
const HIDDEN: char = '\0';

/// The name a door looks `model` up by for `principal`: the name itself, or, for a model the
/// principal may not call, the name behind a mark no model's name can contain. The lookup then
/// fails exactly as it does for a model that does not exist, and the door takes the mark out
/// of the message ([`unmark`]): a hidden model answers as if it were not there.
pub fn visible_name<'a>(principal: Option<&Principal>, model: &'a str) -> std::borrow::Cow<'a, str> {
    match principal {
        Some(p) if !p.may_call(model) => format!("{HIDDEN}{model}").into(),
        _ => model.into(),
    }
}

/// A message or name without the marks of hidden names.
pub fn unmark(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains(HIDDEN) { text.replace(HIDDEN, "").into() } else { text.into() }
}

/// The header (gRPC: metadata) by which a gateway names a request's fairness flow when no
/// tenant is known: the Gateway API Inference Extension's.
pub const FAIRNESS_HEADER: &str = "x-gateway-inference-fairness-id";
/// Longest fairness id taken; a longer one is ignored (the request shares the common flow).
const MAX_FAIRNESS_ID: usize = 128;

/// The principal of a request that sent `value` as its fairness id, when it is a usable one.
pub fn fairness_principal(value: Option<&str>) -> Option<Arc<Principal>> {
    let id = value?.trim();
    (!id.is_empty() && id.len() <= MAX_FAIRNESS_ID && !id.chars().any(char::is_control))
        .then(|| Arc::new(Principal::fairness(id)))
}

/// The flow key and weight of an optional principal (no principal: the empty flow, weight 1).
pub fn flow_of(principal: Option<&Arc<Principal>>) -> (FlowKey, u32) {
    static COMMON: std::sync::LazyLock<FlowKey> = std::sync::LazyLock::new(|| Arc::from(""));
    match principal {
        Some(p) => (Arc::clone(&p.flow), p.weight),
        None => (Arc::clone(&COMMON), 1),
    }
}

/// A tenant's model allow-list: exact names and globs (`*` any run of characters, `?` one).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelRules {
    patterns: Vec<String>,
}

impl ModelRules {
    pub fn new(patterns: Vec<String>) -> Self {
        Self { patterns }
    }

    pub fn matches(&self, model: &str) -> bool {
        self.patterns.iter().any(|p| glob(p.as_bytes(), model.as_bytes()))
    }
}

/// Glob match without recursion blow-up (the classic two-pointer walk with one backtrack point).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Counters of one tenant, kept across reloads of the tenants file while the tenant exists.
#[derive(Debug, Default)]
pub struct TenantCounters {
    /// Requests admitted at a door.
    pub requests: AtomicU64,
    /// Requests refused at a door for the tenant's rate, and for its cap on requests in flight.
    pub refused_rate: AtomicU64,
    pub refused_in_flight: AtomicU64,
    /// Calls refused because the tenant may not use an API (its roles).
    pub refused_role: AtomicU64,
    /// Time requests waited in model queues, and how many waited.
    pub queue_us: AtomicU64,
    pub queued: AtomicU64,
}

/// Virtual times of a queue's flows (see the module). The owner tells it when a flow's requests
/// arrive and leave; [`Self::next`] says which flow goes next.
#[derive(Debug, Default, Clone)]
pub struct Shares {
    flows: HashMap<FlowKey, Clock>,
    /// The virtual time of the last flow served: where an idle flow starts again.
    now: f64,
}

#[derive(Debug, Clone, Copy)]
struct Clock {
    vtime: f64,
    weight: u32,
    backlog: usize,
}

impl Shares {
    /// A request of `flow` joined the queue.
    pub fn arrive(&mut self, flow: &FlowKey, weight: u32) {
        let now = self.now;
        let clock = self.flows.entry(Arc::clone(flow)).or_insert(Clock { vtime: now, weight, backlog: 0 });
        if clock.backlog == 0 {
            clock.vtime = clock.vtime.max(now);
        }
        clock.weight = weight.max(1);
        clock.backlog += 1;
    }

    /// A request of `flow` left the queue to run, costing `cost` (its rows).
    pub fn served(&mut self, flow: &FlowKey, cost: usize) {
        if let Some(clock) = self.flows.get_mut(flow) {
            self.now = self.now.max(clock.vtime);
            clock.vtime += cost.max(1) as f64 / f64::from(clock.weight);
            clock.backlog = clock.backlog.saturating_sub(1);
        }
        self.prune();
    }

    /// A request of `flow` left the queue without running (refused, timed out, cancelled).
    pub fn left(&mut self, flow: &FlowKey) {
        if let Some(clock) = self.flows.get_mut(flow) {
            clock.backlog = clock.backlog.saturating_sub(1);
        }
        self.prune();
    }

    /// The virtual time of `flow`; a flow with nothing queued would start again at the current
    /// one (see [`Self::arrive`]), so it is never behind it.
    pub fn vtime(&self, flow: &FlowKey) -> f64 {
        match self.flows.get(flow) {
            Some(c) if c.backlog > 0 => c.vtime,
            Some(c) => c.vtime.max(self.now),
            None => self.now,
        }
    }

    /// Of `candidates`, the flow that goes next: the least virtual time, the first on a tie.
    pub fn next<'a>(&self, candidates: impl IntoIterator<Item = &'a FlowKey>) -> Option<&'a FlowKey> {
        let mut best: Option<(&FlowKey, f64)> = None;
        for flow in candidates {
            let v = self.vtime(flow);
            if best.is_none_or(|(_, b)| v < b) {
                best = Some((flow, v));
            }
        }
        best.map(|(f, _)| f)
    }

    /// Flows with nothing queued whose clock is not ahead are forgotten: they would start at the
    /// current time anyway. This bounds the map by the flows queued or recently served.
    fn prune(&mut self) {
        if self.flows.len() > 64 {
            let now = self.now;
            self.flows.retain(|_, c| c.backlog > 0 || c.vtime > now);
        }
    }

    /// How many flows have requests queued.
    #[cfg(test)]
    pub fn backlogged(&self) -> usize {
        self.flows.values().filter(|c| c.backlog > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_and_nothing_else() {
        let rules = ModelRules::new(vec!["add_sub".into(), "team_a_*".into(), "v?".into()]);
        for yes in ["add_sub", "team_a_", "team_a_x*y", "v1"] {
            assert!(rules.matches(yes), "{yes}");
        }
        for no in ["add_sub2", "team_b_x", "v12", "", "ADD_SUB"] {
            assert!(!rules.matches(no), "{no}");
        }
        assert!(glob(b"*a*b*c*", b"xxaxxbxxc"));
        assert!(!glob(b"*a*b*c*d", b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaabc"));
        assert!(ModelRules::new(vec!["*".into()]).matches("anything"));
        assert!(!ModelRules::default().matches("anything"));
    }

    /// Serves `rounds` requests from two always-backlogged flows and counts each flow's share.
    fn split(weights: (u32, u32), rounds: usize) -> (usize, usize) {
        let (a, b): (FlowKey, FlowKey) = (Arc::from("a"), Arc::from("b"));
        let mut shares = Shares::default();
        for _ in 0..4 {
            shares.arrive(&a, weights.0);
            shares.arrive(&b, weights.1);
        }
        let mut counts = (0, 0);
        for _ in 0..rounds {
            let next = Arc::clone(shares.next([&a, &b]).unwrap());
            shares.served(&next, 1);
            shares.arrive(&next, if *next == *"a" { weights.0 } else { weights.1 });
            if *next == *"a" { counts.0 += 1 } else { counts.1 += 1 }
        }
        counts
    }

    #[test]
    fn backlogged_flows_share_by_weight() {
        assert_eq!(split((1, 1), 100), (50, 50));
        assert_eq!(split((3, 1), 400), (300, 100));
    }

    #[test]
    fn an_idle_flow_banks_no_credit() {
        let (a, b): (FlowKey, FlowKey) = (Arc::from("a"), Arc::from("b"));
        let mut shares = Shares::default();
        // `a` runs alone for a while.
        for _ in 0..100 {
            shares.arrive(&a, 1);
            shares.served(&a, 1);
        }
        // `b` arrives with a burst; `a` keeps sending: they alternate, `b` does not get 100 in a row.
        for _ in 0..10 {
            shares.arrive(&b, 1);
        }
        shares.arrive(&a, 1);
        let mut order = String::new();
        for _ in 0..6 {
            let next = Arc::clone(shares.next([&a, &b]).unwrap());
            shares.served(&next, 1);
            if *next == *"a" {
                shares.arrive(&a, 1);
            }
            order.push_str(&next);
        }
        assert!(order.matches('a').count() >= 2, "{order}");
        assert_eq!(shares.backlogged(), 2);
    }
}
