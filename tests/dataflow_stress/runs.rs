//! The runs of a plan, with handles and in a scope, and the tests.

use super::*;

// ---------------------------------------------------------------------
// Handles: tasks spawned with `spawn_delayed` on workers and with
// `Runtime::spawn_delayed` from a foreign thread, joined on workers and outside.
// ---------------------------------------------------------------------

/// Delayed tasks spawned by a task, with their ids.
type Spawned = Vec<(usize, JoinHandle<()>)>;

fn run_with_handles(seed: u64, threads: usize, drop_p: f64) {
    let variant = if drop_p > 0.0 {
        "handles, broken"
    } else {
        "handles"
    };
    let (plan, net, state, mut rng) = setup(seed, threads, variant, drop_p);
    let _watchdog = Watchdog::new(
        format!(
            "dataflow_stress: {} (a task neither ran nor was cancelled)",
            state.ctx
        ),
        HANG,
    );
    let state = Arc::new(state);
    let rt = Runtime::builder().num_threads(threads).build().unwrap();

    let (mut outside, mut inside) = (Vec::new(), Vec::new());
    for spec in net.tasks {
        if rng.random_bool(0.3) {
            outside.push(spec);
        } else {
            inside.push(spec);
        }
    }
    let (mut batches_out, mut batches_in) = (Vec::new(), Vec::new());
    for b in net.batches {
        if rng.random_bool(0.5) {
            batches_out.push(b);
        } else {
            batches_in.push(b);
        }
    }
    let mut chunks: Vec<Vec<TaskSpec>> = Vec::new();
    while !inside.is_empty() {
        let n = rng.random_range(1..128).min(inside.len());
        chunks.push(inside.drain(..n).collect());
    }
    let join_inside: Vec<bool> = (0..TASKS).map(|_| rng.random_bool(0.5)).collect();

    let task = |spec: TaskSpec, state: &Arc<State>| {
        let state = state.clone();
        let TaskSpec {
            id,
            deps,
            checks,
            actions,
        } = spec;
        (deps, move || state.run_task(id, &checks, actions))
    };

    let mut outcomes: Vec<Option<Outcome>> = (0..TASKS).map(|_| None).collect();
    std::thread::scope(|sc| {
        for actions in net.foreign {
            let state = &state;
            sc.spawn(move || foreign_fulfiller(state, actions));
        }
        // A foreign thread submitting delayed tasks and fulfiller batches.
        let spawner = sc.spawn(|| {
            let mut handles = Vec::new();
            let mut batches = batches_out.into_iter();
            for (i, spec) in outside.into_iter().enumerate() {
                let id = spec.id;
                let (deps, f) = task(spec, &state);
                handles.push((id, rt.spawn_delayed(deps, f)));
                if i % 8 == 0 {
                    if let Some(b) = batches.next() {
                        let state = state.clone();
                        drop(rt.spawn(move || state.perform(b))); // detached
                    }
                }
            }
            for b in batches {
                let state = state.clone();
                drop(rt.spawn(move || state.perform(b)));
            }
            handles
                .into_iter()
                .map(|(id, h)| (id, outcome(h.try_join())))
                .collect::<Vec<_>>()
        });
        // On the workers: chunks of tasks spawned by tasks, fulfiller
        // batches between them; about half the handles joined there.
        let (joined, rest) = rt.run(|| {
            let mut batches = batches_in.into_iter();
            let mut spawners: Vec<JoinHandle<Spawned>> = Vec::new();
            for chunk in chunks {
                let st = state.clone();
                spawners.push(spawn(move || {
                    chunk
                        .into_iter()
                        .map(|spec| {
                            let id = spec.id;
                            let (deps, f) = task(spec, &st);
                            (id, spawn_delayed(deps, f))
                        })
                        .collect()
                }));
                if let Some(b) = batches.next() {
                    let state = state.clone();
                    drop(spawn(move || state.perform(b)));
                }
            }
            for b in batches {
                let state = state.clone();
                drop(spawn(move || state.perform(b)));
            }
            state.go.store(true, Relaxed);
            let mut joined = Vec::new();
            let mut rest = Vec::new();
            for s in spawners {
                for (id, h) in s.join() {
                    if join_inside[id] {
                        joined.push((id, outcome(h.try_join())));
                    } else {
                        rest.push((id, h));
                    }
                }
            }
            (joined, rest)
        });
        for (id, o) in joined {
            outcomes[id] = Some(o);
        }
        for (id, h) in rest {
            outcomes[id] = Some(outcome(h.try_join()));
        }
        for (id, o) in spawner.join().unwrap() {
            outcomes[id] = Some(o);
        }
    });
    drop(rt); // finishes the detached fulfiller batches
    verify(&plan, &state, Some(&outcomes));
}

// ---------------------------------------------------------------------
// Scope: borrowing tasks spawned with `Scope::spawn_delayed`, from the
// scope's body and from tasks of the scope.
// ---------------------------------------------------------------------

fn run_in_scope(seed: u64, threads: usize, drop_p: f64) {
    let variant = if drop_p > 0.0 {
        "scope, broken"
    } else {
        "scope"
    };
    let (plan, net, state, mut rng) = setup(seed, threads, variant, drop_p);
    let _watchdog = Watchdog::new(
        format!(
            "dataflow_stress: {} (a task neither ran nor was cancelled)",
            state.ctx
        ),
        HANG,
    );
    let state = &state; // borrowed by every task: no Arc
    let rt = Runtime::builder().num_threads(threads).build().unwrap();
    let nested: Vec<bool> = (0..net.tasks.len()).map(|_| rng.random_bool(0.5)).collect();

    let result = std::thread::scope(|sc| {
        for actions in net.foreign {
            sc.spawn(move || foreign_fulfiller(state, actions));
        }
        catch_unwind(AssertUnwindSafe(|| {
            rt.run(|| {
                scope(|s| {
                    let mut batches = net.batches.into_iter();
                    let mut chunk = Vec::new();
                    for spec in net.tasks {
                        if nested[spec.id] {
                            chunk.push(spec);
                        } else {
                            let (deps, checks, actions) = (spec.deps, spec.checks, spec.actions);
                            let id = spec.id;
                            s.spawn_delayed(deps, move |_| state.run_task(id, &checks, actions));
                        }
                        if chunk.len() == 64 {
                            let chunk = std::mem::take(&mut chunk);
                            s.spawn(move |s| {
                                for spec in chunk {
                                    let TaskSpec {
                                        id,
                                        deps,
                                        checks,
                                        actions,
                                    } = spec;
                                    s.spawn_delayed(deps, move |_| {
                                        state.run_task(id, &checks, actions)
                                    });
                                }
                            });
                            if let Some(b) = batches.next() {
                                s.spawn(move |_| state.perform(b));
                            }
                        }
                    }
                    for spec in chunk {
                        let TaskSpec {
                            id,
                            deps,
                            checks,
                            actions,
                        } = spec;
                        s.spawn_delayed(deps, move |_| state.run_task(id, &checks, actions));
                    }
                    for b in batches {
                        s.spawn(move |_| state.perform(b));
                    }
                    state.go.store(true, Relaxed);
                })
            })
        }))
    });
    let any_cancelled = plan.cancelled.iter().any(|&c| c);
    match result {
        Ok(()) => assert!(
            !any_cancelled,
            "{}: scope returned although tasks were cancelled",
            state.ctx
        ),
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "<not a string>".into());
            assert!(
                any_cancelled && msg.contains("cancelled"),
                "{}: scope panicked: {msg}",
                state.ctx
            );
        }
    }
    drop(rt);
    verify(&plan, state, None);
}

#[test]
fn random_dag_with_handles() {
    for seed in seeds(1) {
        for threads in THREADS {
            run_with_handles(seed, threads, 0.0);
        }
    }
}

#[test]
fn random_dag_with_broken_promises() {
    for seed in seeds(2) {
        for threads in THREADS {
            run_with_handles(seed, threads, DROP_P);
        }
    }
}

#[test]
fn random_dag_in_a_scope() {
    for seed in seeds(3) {
        for threads in THREADS {
            run_in_scope(seed, threads, 0.0);
        }
    }
}

#[test]
fn random_dag_in_a_scope_with_broken_promises() {
    for seed in seeds(4) {
        for threads in THREADS {
            run_in_scope(seed, threads, DROP_P);
        }
    }
}
