//! Dataflow stress: seeded random DAGs of delayed tasks and promises.
//!
//! Each run builds a few thousand events (a `Promise`, or one bucket of a
//! `LoopPromise`) and thousands of tasks that each wait for 1 to 4 of them.
//! The events are fulfilled in random order by the tasks themselves (a task
//! only fulfills events ordered after all of its own dependencies, so the
//! graph stays acyclic and everything can finish), by fulfiller tasks on the
//! workers and by four foreign threads, while the tasks are still being
//! spawned from a worker and from a foreign thread.
//!
//! Every task checks, when it starts, that each of its dependencies is
//! fulfilled (through a `Dep`, and through per-iteration flags written
//! before each `fulfill` call, so a task started too early, or without the
//! fulfiller's writes visible, is caught) and counts its runs. The broken
//! variants drop some promises unfulfilled; the exact set of tasks that must
//! be cancelled (transitively: a cancelled task never fulfills its events)
//! is computed from the DAG beforehand.
//!
//! Seeds are fixed; a failure names its seed, and `DATAFLOW_STRESS_SEED=..`
//! reruns just that one (`DATAFLOW_STRESS_ROUNDS=n` runs n seeds per test).

#[path = "../support/mod.rs"]
mod support;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use selvedge::{scope, spawn, spawn_delayed, Dep, JoinHandle, LoopPromise, Promise, Runtime};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::Watchdog;

/// Delayed tasks per run.
const TASKS: usize = 5_000;
/// Events (promises and loop-promise buckets) per run, at least.
const EVENTS: usize = 2_000;
/// A task's dependencies lie within this many events of a random centre
/// (one of these, per seed), so that tasks fulfilling events make chains,
/// from short and wide to long and narrow.
const WINDOWS: [usize; 3] = [8, 40, 400];
/// Foreign threads fulfilling events.
const FOREIGN: usize = 4;
/// Fulfiller tasks on the workers.
const BATCHES: usize = 150;
/// Worker counts, up to four times the cores of the CI machine.
const THREADS: [usize; 3] = [2, 4, 8];
/// Probability that a unit is dropped unfulfilled, in the broken variants.
const DROP_P: f64 = 0.03;
/// A run that takes this long hangs (a task neither ran nor was
/// cancelled): report its seed and abort rather than stall CI.
const HANG: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------
// The plan: a pure function of the seed.
// ---------------------------------------------------------------------

/// What can be fulfilled on its own: a promise, or one loop iteration.
#[derive(Clone, Copy, Debug)]
enum UnitKind {
    Promise,
    Loop { lp: usize, iter: usize },
}

/// Who fulfills (or drops) a unit.
#[derive(Clone, Copy, Debug)]
enum Party {
    Task(usize),
    Batch(usize),
    Foreign(usize),
}

#[derive(Clone, Copy, Debug)]
struct Unit {
    kind: UnitKind,
    event: usize,
    /// False: its handle is dropped unfulfilled (broken variants).
    fulfilled: bool,
    party: Party,
    /// Fulfill it twice (the second call must return false).
    twice: bool,
}

struct Plan {
    /// Range and bucket size of each loop promise.
    loops: Vec<(Range<usize>, usize)>,
    units: Vec<Unit>,
    /// The units of each event (one for a promise, a bucket's iterations).
    events: Vec<Vec<usize>>,
    /// Each task's dependencies, each named by one of the event's units
    /// (`lp.at(iter)` for any iteration of a bucket names the bucket).
    task_deps: Vec<Vec<usize>>,
    /// Expected: the task is cancelled (a dependency is broken).
    cancelled: Vec<bool>,
    /// Foreign threads start fulfilling at once (racing with the spawns),
    /// or only once most tasks are spawned (most of them parked).
    foreign_early: bool,
    /// The dependency window used.
    width: usize,
}

impl Plan {
    fn new(seed: u64, drop_p: f64) -> Plan {
        let mut rng = SmallRng::seed_from_u64(seed);

        // Events: promises, and the buckets of loop promises of random
        // length and bucket size, in random order.
        let mut loops = Vec::new();
        let mut raw: Vec<Vec<UnitKind>> = Vec::new();
        while raw.len() < EVENTS {
            if rng.random_bool(0.5) {
                raw.push(vec![UnitKind::Promise]);
                continue;
            }
            let len = rng.random_range(1..48);
            let bucket = [1, 1, 2, 3, 8][rng.random_range(0..5)];
            let start = rng.random_range(0..1000);
            let lp = loops.len();
            loops.push((start..start + len, bucket));
            for b in (0..len).step_by(bucket) {
                raw.push(
                    (b..(b + bucket).min(len))
                        .map(|k| UnitKind::Loop {
                            lp,
                            iter: start + k,
                        })
                        .collect(),
                );
            }
        }
        raw.shuffle(&mut rng);
        let mut units = Vec::new();
        let mut events = Vec::new();
        for (event, kinds) in raw.into_iter().enumerate() {
            let mut ids = Vec::new();
            for kind in kinds {
                ids.push(units.len());
                units.push(Unit {
                    kind,
                    event,
                    fulfilled: true,
                    party: Party::Foreign(0),
                    twice: false,
                });
            }
            events.push(ids);
        }
        let n_events = events.len();
        let width = WINDOWS[rng.random_range(0..WINDOWS.len())];
        let foreign_early = rng.random_bool(0.5);

        // Tasks: 1 to 4 dependencies near a random centre, sometimes one
        // listed twice.
        let task_deps: Vec<Vec<usize>> = (0..TASKS)
            .map(|_| {
                let c = rng.random_range(0..n_events);
                let window = c.saturating_sub(width)..(c + width).min(n_events);
                let mut deps: Vec<usize> = Vec::new();
                for _ in 0..rng.random_range(1..=4) {
                    if !deps.is_empty() && rng.random_bool(0.05) {
                        deps.push(deps[rng.random_range(0..deps.len())]);
                        continue;
                    }
                    let ids = &events[rng.random_range(window.clone())];
                    deps.push(ids[rng.random_range(0..ids.len())]);
                }
                deps
            })
            .collect();
        let max_dep: Vec<usize> = task_deps
            .iter()
            .map(|d| d.iter().map(|&u| units[u].event).max().unwrap())
            .collect();
        let mut by_max_dep: Vec<usize> = (0..TASKS).collect();
        by_max_dep.sort_by_key(|&t| max_dep[t]);

        // Who settles each unit. A task only takes units of events after
        // all of its dependencies (acyclic); preferring tasks whose
        // dependencies end just before the event makes long chains.
        //
        // When promises break, tasks take no loop iterations: a loop
        // promise's buckets break only when its *last* handle goes, so a
        // task holding a handle of a loop promise while waiting for one of
        // its broken buckets would keep it from breaking, forever.
        for u in &mut units {
            let n = by_max_dep.partition_point(|&t| max_dep[t] < u.event);
            let r = rng.random_range(0..10);
            let task_may_take = drop_p == 0.0 || matches!(u.kind, UnitKind::Promise);
            u.party = if r < 4 && n > 0 && task_may_take {
                Party::Task(by_max_dep[rng.random_range(n.saturating_sub(300)..n)])
            } else if r < 7 {
                Party::Batch(rng.random_range(0..BATCHES))
            } else {
                Party::Foreign(rng.random_range(0..FOREIGN))
            };
            u.fulfilled = !rng.random_bool(drop_p);
            u.twice = rng.random_bool(0.05);
        }

        // Expected outcome, in event order: an event is broken when one of
        // its units is dropped, or belongs to a cancelled task (whose
        // dependencies all come earlier, so are already decided).
        let mut broken = vec![false; n_events];
        let cancelled_with =
            |t: usize, broken: &[bool]| task_deps[t].iter().any(|&u| broken[units[u].event]);
        for e in 0..n_events {
            broken[e] = events[e].iter().any(|&u| {
                !units[u].fulfilled
                    || matches!(units[u].party, Party::Task(t) if cancelled_with(t, &broken))
            });
        }
        let cancelled = (0..TASKS).map(|t| cancelled_with(t, &broken)).collect();
        Plan {
            loops,
            units,
            events,
            task_deps,
            cancelled,
            foreign_early,
            width,
        }
    }
}

// ---------------------------------------------------------------------
// The live objects built from a plan.
// ---------------------------------------------------------------------

/// A handle that can fulfill one unit.
enum Handle {
    Promise(Promise),
    Loop(LoopPromise, usize),
}

impl Handle {
    fn fulfill(&self) -> bool {
        match self {
            Handle::Promise(p) => p.fulfill(),
            Handle::Loop(lp, i) => lp.fulfill(*i),
        }
    }
}

/// A unit to settle, with the only handle through which it can be
/// fulfilled (dropped once used, which may break the promise).
struct Action {
    unit: usize,
    handle: Handle,
    fulfill: bool,
    twice: bool,
}

/// A delayed task: what it waits for, what it checks, what it fulfills.
struct TaskSpec {
    id: usize,
    deps: Vec<Dep>,
    /// The same dependencies (cloned, so they do not keep promises from
    /// breaking), with their event.
    checks: Vec<(Dep, usize)>,
    actions: Vec<Action>,
}

/// What every party records into.
struct State {
    ctx: String,
    /// Written (relaxed) just before the unit's `fulfill`: a task that sees
    /// its dependency fulfilled must see these.
    set: Vec<AtomicBool>,
    runs: Vec<AtomicUsize>,
    events: Vec<Vec<usize>>,
    violations: Mutex<Vec<String>>,
    /// Foreign threads wait for this.
    go: AtomicBool,
}

impl State {
    fn violation(&self, msg: String) {
        let mut v = self.violations.lock().unwrap();
        if v.len() < 20 {
            v.push(msg);
        }
    }

    /// The body of DAG task `id`.
    fn run_task(&self, id: usize, checks: &[(Dep, usize)], actions: Vec<Action>) {
        let runs = self.runs[id].fetch_add(1, Relaxed) + 1;
        if runs != 1 {
            self.violation(format!("task {id} ran {runs} times"));
        }
        for (dep, e) in checks {
            if !dep.is_fulfilled() {
                self.violation(format!("task {id} started before event {e} was fulfilled"));
            }
            for &u in &self.events[*e] {
                if !self.set[u].load(Relaxed) {
                    self.violation(format!(
                        "task {id} started without seeing unit {u} of event {e} set"
                    ));
                }
            }
        }
        self.perform(actions);
    }

    fn perform(&self, actions: Vec<Action>) {
        for a in actions {
            if a.fulfill {
                self.set[a.unit].store(true, Relaxed);
                if !a.handle.fulfill() {
                    self.violation(format!("first fulfill of unit {} returned false", a.unit));
                }
                if a.twice && a.handle.fulfill() {
                    self.violation(format!("second fulfill of unit {} returned true", a.unit));
                }
            }
            // The handle drops here: for a unit left unfulfilled, this may
            // be the promise's last handle, which breaks it.
        }
    }
}

/// Everything a run needs, built from the plan.
struct Net {
    tasks: Vec<TaskSpec>,
    batches: Vec<Vec<Action>>,
    foreign: Vec<Vec<Action>>,
}

impl Net {
    fn build(plan: &Plan, rng: &mut SmallRng) -> Net {
        let loops: Vec<LoopPromise> = plan
            .loops
            .iter()
            .map(|(r, b)| LoopPromise::with_bucket_size(r.clone(), *b))
            .collect();
        let mut promises: Vec<Option<Promise>> = plan
            .units
            .iter()
            .map(|u| matches!(u.kind, UnitKind::Promise).then(Promise::new))
            .collect();
        let dep_of = |u: usize, promises: &[Option<Promise>]| match plan.units[u].kind {
            UnitKind::Promise => promises[u].as_ref().unwrap().dep(),
            UnitKind::Loop { lp, iter } => loops[lp].at(iter),
        };
        let mut tasks: Vec<TaskSpec> = plan
            .task_deps
            .iter()
            .enumerate()
            .map(|(id, deps)| TaskSpec {
                id,
                deps: deps.iter().map(|&u| dep_of(u, &promises)).collect(),
                checks: deps
                    .iter()
                    .map(|&u| (dep_of(u, &promises), plan.units[u].event))
                    .collect(),
                actions: Vec::new(),
            })
            .collect();
        let mut batches: Vec<Vec<Action>> = (0..BATCHES).map(|_| Vec::new()).collect();
        let mut foreign: Vec<Vec<Action>> = (0..FOREIGN).map(|_| Vec::new()).collect();
        // Hand each unit's only fulfilling handle to its party.
        for (id, u) in plan.units.iter().enumerate() {
            let handle = match u.kind {
                UnitKind::Promise => Handle::Promise(promises[id].take().unwrap()),
                UnitKind::Loop { lp, iter } => Handle::Loop(loops[lp].clone(), iter),
            };
            let action = Action {
                unit: id,
                handle,
                fulfill: u.fulfilled,
                twice: u.twice,
            };
            match u.party {
                Party::Task(t) => tasks[t].actions.push(action),
                Party::Batch(b) => batches[b].push(action),
                Party::Foreign(f) => foreign[f].push(action),
            }
        }
        drop(loops); // the parties now hold the only handles
        for t in &mut tasks {
            t.actions.shuffle(rng);
        }
        for b in batches.iter_mut().chain(foreign.iter_mut()) {
            b.shuffle(rng);
        }
        Net {
            tasks,
            batches,
            foreign,
        }
    }
}

/// Fulfills a foreign thread's units, yielding now and then so they spread
/// over the run.
fn foreign_fulfiller(state: &State, actions: Vec<Action>) {
    while !state.go.load(Relaxed) {
        std::thread::yield_now();
    }
    for (i, a) in actions.into_iter().enumerate() {
        if i % 8 == 0 {
            std::thread::yield_now();
        }
        state.perform(vec![a]);
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Ran,
    Cancelled,
    Panicked(String),
}

fn outcome(r: Result<(), selvedge::JoinError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Ran,
        Err(e) if e.is_cancelled() => Outcome::Cancelled,
        Err(e) => Outcome::Panicked(e.to_string()),
    }
}

/// The seeds of test number `test`: six by default, or
/// `DATAFLOW_STRESS_ROUNDS=n` of them for a longer soak, or just
/// `DATAFLOW_STRESS_SEED=s` (decimal or 0x hex) to rerun a failure.
fn seeds(test: u64) -> Vec<u64> {
    if let Ok(s) = std::env::var("DATAFLOW_STRESS_SEED") {
        let s = s.trim();
        let seed = match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        return vec![seed.expect("DATAFLOW_STRESS_SEED must be a number")];
    }
    let rounds = std::env::var("DATAFLOW_STRESS_ROUNDS")
        .map(|n| {
            n.trim()
                .parse()
                .expect("DATAFLOW_STRESS_ROUNDS must be a number")
        })
        .unwrap_or(6);
    (0..rounds).map(|i| (test << 32) + i).collect()
}

/// Checks everything recorded against the plan.
fn verify(plan: &Plan, state: &State, outcomes: Option<&[Option<Outcome>]>) {
    let ctx = &state.ctx;
    let violations = state.violations.lock().unwrap();
    assert!(violations.is_empty(), "{ctx}: {violations:#?}");
    for t in 0..TASKS {
        let expected = usize::from(!plan.cancelled[t]);
        let runs = state.runs[t].load(Relaxed);
        assert_eq!(
            runs, expected,
            "{ctx}: task {t} ran {runs} times, expected {expected} (deps {:?})",
            plan.task_deps[t]
        );
        if let Some(outcomes) = outcomes {
            let want = if plan.cancelled[t] {
                Outcome::Cancelled
            } else {
                Outcome::Ran
            };
            assert_eq!(outcomes[t].as_ref(), Some(&want), "{ctx}: task {t}");
        }
    }
    for (id, u) in plan.units.iter().enumerate() {
        let expected = u.fulfilled && !matches!(u.party, Party::Task(t) if plan.cancelled[t]);
        assert_eq!(state.set[id].load(Relaxed), expected, "{ctx}: unit {id}");
    }
}

fn setup(seed: u64, threads: usize, variant: &str, drop_p: f64) -> (Plan, Net, State, SmallRng) {
    let ctx = format!(
        "{variant}, {threads} workers, seed {seed:#x} (rerun with DATAFLOW_STRESS_SEED={seed:#x})"
    );
    let plan = Plan::new(seed, drop_p);
    let cancelled = plan.cancelled.iter().filter(|&&c| c).count();
    println!(
        "{ctx}: {} events, {} units, {TASKS} tasks, {cancelled} to be cancelled, \
         window {}, foreign threads start {}",
        plan.events.len(),
        plan.units.len(),
        plan.width,
        if plan.foreign_early {
            "at once"
        } else {
            "late"
        },
    );
    if drop_p > 0.0 {
        // Otherwise the variant tests nothing: both outcomes must occur.
        assert!(
            cancelled > 0 && cancelled < TASKS,
            "{ctx}: {cancelled} cancelled"
        );
    }
    let mut rng = SmallRng::seed_from_u64(seed ^ 0xA5A5_5A5A);
    let net = Net::build(&plan, &mut rng);
    let state = State {
        ctx,
        set: (0..plan.units.len())
            .map(|_| AtomicBool::new(false))
            .collect(),
        runs: (0..TASKS).map(|_| AtomicUsize::new(0)).collect(),
        events: plan.events.clone(),
        violations: Mutex::new(Vec::new()),
        go: AtomicBool::new(plan.foreign_early),
    };
    (plan, net, state, rng)
}

mod runs;
