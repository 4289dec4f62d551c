//! Stalls that speak: programs that can never finish make the runtime say
//! so on stderr, once, naming what waits; a promise fulfilled after the
//! warning still finishes everything; a long task is no stall.
//!
//! Each test runs its program in a child process (this binary again, with
//! [`CHILD`] naming the test), reads the child's stderr until the warning
//! comes or [`DEADLINE`] passes, checks what it says, and kills the child
//! when its program can never end.

use selvedge::{Promise, Runtime};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Names the test whose program a child process runs.
const CHILD: &str = "SELVEDGE_STALL_TEST_CHILD";

/// The stall warning's delay in the programs: short, so the tests are.
const DELAY: Duration = Duration::from_millis(300);

/// How long a test waits for the warning (a few delays are enough; more
/// covers a loaded machine).
const DEADLINE: Duration = Duration::from_secs(20);

/// The first line of a warning.
const WARNING: &str = "selvedge: no task has run for";

/// A runtime of two workers named `name` that warns after [`DELAY`].
fn runtime(name: &str) -> Runtime {
    Runtime::builder()
        .num_threads(2)
        .thread_name(name)
        .stall_warning(Some(DELAY))
        .build()
        .unwrap()
}

/// Whether this process runs the program of test `name`.
fn is_child(name: &str) -> bool {
    std::env::var(CHILD).is_ok_and(|v| v == name)
}

/// This binary running test `name`'s program, its output read line by
/// line. Dropping it kills the process.
struct Child {
    process: std::process::Child,
    /// Lines of stderr (and of stdout, prefixed `stdout: `), as they come.
    lines: mpsc::Receiver<String>,
    /// Every line so far, for messages.
    seen: Vec<String>,
}

impl Child {
    fn start(name: &str, env: &[(&str, &str)]) -> Child {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, name)
            .env_remove("SELVEDGE_STALL_WARN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (var, value) in env {
            command.env(var, value);
        }
        let mut process = command.spawn().expect("starting the child");
        let (tx, lines) = mpsc::channel();
        let stderr = process.stderr.take().unwrap();
        let stdout = process.stdout.take().unwrap();
        let to_err = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = to_err.send(line);
            }
        });
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(format!("stdout: {line}"));
            }
        });
        Child {
            process,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line, or `None` once `deadline` passed or the output
    /// ended.
    fn next_line(&mut self, deadline: Instant) -> Option<String> {
        let left = deadline.checked_duration_since(Instant::now())?;
        let line = self.lines.recv_timeout(left).ok()?;
        self.seen.push(line.clone());
        Some(line)
    }

    /// The next warning, whole (from its first line to the one that ends
    /// it); fails the test when none comes before the deadline.
    fn warning(&mut self) -> String {
        let deadline = Instant::now() + DEADLINE;
        while let Some(line) = self.next_line(deadline) {
            if line.starts_with(WARNING) {
                let mut warning = line;
                while let Some(next) = self.next_line(deadline) {
                    warning.push('\n');
                    warning.push_str(&next);
                    if next.contains("turns it off") {
                        return warning;
                    }
                }
                break;
            }
        }
        panic!(
            "no stall warning within {DEADLINE:?}; the child printed:\n{}",
            self.seen.join("\n")
        );
    }

    /// Every line until the child exits (it must, successfully, before the
    /// deadline).
    fn finish(&mut self) -> Vec<String> {
        let deadline = Instant::now() + DEADLINE;
        while self.next_line(deadline).is_some() {}
        loop {
            if let Some(status) = self.process.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "the child failed ({status}):\n{}",
                    self.seen.join("\n")
                );
                return self.seen.clone();
            }
            assert!(
                Instant::now() < deadline,
                "the child did not finish within {DEADLINE:?}:\n{}",
                self.seen.join("\n")
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends a line to the child's stdin.
    fn send_line(&mut self) {
        let stdin = self.process.stdin.as_mut().unwrap();
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Blocks until the parent sends a line.
fn wait_for_parent() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
}

#[track_caller]
fn assert_contains(warning: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            warning.contains(part),
            "the warning does not say {part:?}:\n{warning}"
        );
    }
}

/// A waits on B's promise and fulfils its own; B the reverse.
#[test]
fn a_promise_cycle_is_reported() {
    const NAME: &str = "a_promise_cycle_is_reported";
    if is_child(NAME) {
        let rt = runtime("cycle");
        let (pa, pb) = (Promise::new(), Promise::new());
        let a = {
            let pa = pa.clone();
            rt.spawn_delayed([pb.dep()], move || pa.fulfill())
        };
        let b = rt.spawn_delayed([pa.dep()], move || pb.fulfill());
        drop(pa);
        a.join();
        b.join();
        unreachable!("a promise cycle finished");
    }
    let warning = Child::start(NAME, &[]).warning();
    assert_contains(
        &warning,
        &[
            "for 300ms",
            "runtime `cycle`, 2 workers",
            "1 thread waits and 2 tasks sit parked",
            &format!("thread `{NAME}` joins `stall::{NAME}::{{{{closure}}}}`"),
            &format!("parked: 2 × `stall::{NAME}::{{{{closure}}}}`"),
            "a promise cycle",
        ],
    );
}

/// A delayed task waiting on a promise whose only handle is in its own
/// closure, joined from a task of the runtime.
#[test]
fn a_task_waiting_on_a_promise_it_holds_is_reported() {
    const NAME: &str = "a_task_waiting_on_a_promise_it_holds_is_reported";
    if is_child(NAME) {
        let rt = runtime("own");
        rt.run(|| {
            let p = Promise::new();
            let dep = p.dep();
            selvedge::named("holds its own promise", || {
                selvedge::spawn_delayed([dep], move || p.fulfill())
            })
            .join()
        });
        unreachable!("a task waiting on its own promise ran");
    }
    let warning = Child::start(NAME, &[]).warning();
    // The worker running `run`'s closure joins the delayed task; this
    // thread joins `run`'s task.
    let parked_name = if cfg!(feature = "trace") {
        "holds its own promise".to_owned()
    } else {
        format!("stall::{NAME}::{{{{closure}}}}::{{{{closure}}}}::{{{{closure}}}}")
    };
    assert_contains(
        &warning,
        &[
            "2 threads wait and 1 task sits parked",
            &format!("joins `{parked_name}`"),
            &format!("parked: 1 × `{parked_name}`"),
            // `run`'s task, named after its closure (with the `trace`
            // feature; without, its type names `run`'s wrapper around it).
            &format!("thread `{NAME}` joins `"),
            &format!("stall::{NAME}::{{{{closure}}}}"),
            "whose handle it holds itself",
        ],
    );
    assert!(
        warning.contains("worker `own-0` joins") || warning.contains("worker `own-1` joins"),
        "{warning}"
    );
}

/// A scope whose delayed task waits on a promise of the scope's caller,
/// fulfilled after the scope.
#[test]
fn a_scope_waiting_on_a_promise_of_its_frame_is_reported() {
    const NAME: &str = "a_scope_waiting_on_a_promise_of_its_frame_is_reported";
    if is_child(NAME) {
        let rt = runtime("scoped");
        rt.run(|| {
            let p = Promise::new();
            selvedge::scope(|s| {
                s.spawn_delayed([p.dep()], |_| ());
            });
            p.fulfill();
        });
        unreachable!("the scope ended");
    }
    let warning = Child::start(NAME, &[]).warning();
    assert_contains(
        &warning,
        &[
            "2 threads wait and 1 task sits parked",
            "waits for tasks it started (a scope's",
            &format!("parked: 1 × `stall::{NAME}::{{{{closure}}}}"),
            "fulfilled only after the scope ends",
        ],
    );
}

/// A runtime's drop waits for a scope whose delayed task waits on a
/// promise that the dropping thread holds: the runtime is still watched
/// while its drop waits for its tasks.
#[test]
fn a_drop_waiting_on_a_stalled_scope_is_reported() {
    const NAME: &str = "a_drop_waiting_on_a_stalled_scope_is_reported";
    if is_child(NAME) {
        let rt = runtime("dropped");
        let p = Promise::new();
        let dep = p.dep();
        let _scope = rt.spawn(move || selvedge::scope(|s| s.spawn_delayed([dep], |_| ())));
        drop(rt);
        p.fulfill();
        unreachable!("the drop returned");
    }
    let warning = Child::start(NAME, &[]).warning();
    assert_contains(
        &warning,
        &[
            "1 thread waits and 1 task sits parked",
            "worker `dropped-",
            "waits for tasks it started",
        ],
    );
}

/// A delayed task whose producer panicked while the waiting thread keeps
/// a clone of the promise: on the global runtime, which takes its delay
/// from `SELVEDGE_STALL_WARN`.
#[test]
fn a_consumer_of_a_panicked_producer_is_reported() {
    const NAME: &str = "a_consumer_of_a_panicked_producer_is_reported";
    if is_child(NAME) {
        let p = Promise::new();
        let producer = {
            let p = p.clone();
            selvedge::spawn(move || {
                if std::hint::black_box(true) {
                    panic!("the producer failed");
                }
                p.fulfill();
            })
        };
        let consumer = selvedge::spawn_delayed([p.dep()], || 42);
        assert!(producer.try_join().unwrap_err().is_panic());
        consumer.join();
        unreachable!("the consumer ran");
    }
    let warning = Child::start(NAME, &[("SELVEDGE_STALL_WARN", "0.3")]).warning();
    assert_contains(
        &warning,
        &[
            "runtime `selvedge`",
            "1 thread waits and 1 task sits parked",
            &format!("thread `{NAME}` joins `stall::{NAME}::{{{{closure}}}}`"),
            "a producer that panicked",
        ],
    );
}

/// Tasks parked on a promise that a thread outside the runtime fulfils
/// only after the warning: everything still runs, the warning came once,
/// and a second stall after progress is reported again.
#[test]
fn a_promise_fulfilled_from_outside_after_the_warning_completes_everything() {
    const NAME: &str = "a_promise_fulfilled_from_outside_after_the_warning_completes_everything";
    if is_child(NAME) {
        let rt = runtime("late");
        for round in 0..2 {
            let p = Promise::new();
            let fulfiller = {
                let p = p.clone();
                std::thread::spawn(move || {
                    wait_for_parent();
                    p.fulfill();
                })
            };
            let sum: u64 = rt.run(|| {
                let handles: Vec<_> = (0..10u64)
                    .map(|i| selvedge::spawn_delayed([p.dep()], move || i))
                    .collect();
                let mut in_scope = 0u64;
                selvedge::scope(|s| {
                    s.spawn_delayed([p.dep()], |_| in_scope = 100);
                });
                handles.into_iter().map(|h| h.join()).sum::<u64>() + in_scope
            });
            fulfiller.join().unwrap();
            println!("round {round} completed: {sum}");
        }
        return;
    }
    let mut child = Child::start(NAME, &[]);
    for round in 0..2 {
        let warning = child.warning();
        assert_contains(
            &warning,
            &["11 tasks sit parked", "waits for tasks it started"],
        );
        // Three more delays without a second warning for this stall.
        std::thread::sleep(3 * DELAY);
        child.send_line();
        let deadline = Instant::now() + DEADLINE;
        // (The harness's "test ... " may begin the line.)
        let completed = format!("round {round} completed: 145");
        while let Some(line) = child.next_line(deadline) {
            assert!(
                !line.starts_with(WARNING),
                "a second warning for the same stall:\n{}",
                child.seen.join("\n")
            );
            if line.ends_with(&completed) {
                break;
            }
        }
        assert!(
            child.seen.iter().any(|l| l.ends_with(&completed)),
            "round {round} did not complete:\n{}",
            child.seen.join("\n")
        );
    }
    let lines = child.finish();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with(WARNING)).count(),
        2,
        "one warning per stall:\n{}",
        lines.join("\n")
    );
}

/// A task that runs longer than the delay while others wait on what it
/// will fulfil is no stall.
#[test]
fn a_long_task_is_not_a_stall() {
    const NAME: &str = "a_long_task_is_not_a_stall";
    if is_child(NAME) {
        let rt = runtime("busy");
        let p = Promise::new();
        let waiting = rt.spawn_delayed([p.dep()], || 7);
        let long = rt.spawn(move || {
            std::thread::sleep(6 * DELAY);
            p.fulfill();
        });
        assert_eq!(waiting.join(), 7);
        long.join();
        return;
    }
    let lines = Child::start(NAME, &[]).finish();
    assert!(
        !lines.iter().any(|l| l.starts_with(WARNING)),
        "a long task was reported as a stall:\n{}",
        lines.join("\n")
    );
}

/// `stall_warning(None)` turns the warning off, whatever
/// `SELVEDGE_STALL_WARN` says.
#[test]
fn no_warning_when_the_builder_turns_it_off() {
    const NAME: &str = "no_warning_when_the_builder_turns_it_off";
    if is_child(NAME) {
        let rt = Runtime::builder()
            .num_threads(2)
            .stall_warning(None)
            .build()
            .unwrap();
        let p = Promise::new();
        let stuck = rt.spawn_delayed([p.dep()], || ());
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(8 * DELAY);
            drop(p);
        });
        // Cancelled once the promise is dropped unfulfilled.
        assert!(stuck.try_join().unwrap_err().is_cancelled());
        releaser.join().unwrap();
        return;
    }
    let lines = Child::start(NAME, &[("SELVEDGE_STALL_WARN", "0.1")]).finish();
    assert!(
        !lines.iter().any(|l| l.starts_with(WARNING)),
        "warned with the warning turned off:\n{}",
        lines.join("\n")
    );
}
