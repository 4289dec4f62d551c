//! The lifetime and thread-safety rules of the API, as doc tests that must
//! fail to compile (each next to a twin that compiles, so a failure is for
//! the reason named, not a typo). Built only for `cargo test --doc`.
//!
//! A scope's task cannot outlive what it borrows: a local of the scope's
//! closure dies before the scope waits for its tasks.
//!
//! ```compile_fail
//! selvedge::scope(|s| {
//!     let local = vec![1, 2, 3];
//!     s.spawn(|_| println!("{}", local.len()));
//! });
//! ```
//!
//! ```
//! let outer = vec![1, 2, 3];
//! selvedge::scope(|s| {
//!     s.spawn(|_| println!("{}", outer.len()));
//! });
//! ```
//!
//! The scope itself cannot leave its closure.
//!
//! ```compile_fail
//! let mut leaked = None;
//! selvedge::scope(|s| leaked = Some(s));
//! ```
//!
//! ```
//! let mut count = 0;
//! selvedge::scope(|_s| count += 1);
//! assert_eq!(count, 1);
//! ```
//!
//! `spawn` and `Runtime::spawn` take `'static` closures: their tasks may
//! outlive the caller's frame.
//!
//! ```compile_fail
//! let data = vec![1, 2, 3];
//! let h = selvedge::spawn(|| data.len());
//! h.join();
//! ```
//!
//! ```compile_fail
//! let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
//! let data = vec![1, 2, 3];
//! let h = rt.spawn(|| data.len());
//! h.join();
//! ```
//!
//! ```
//! let data = vec![1, 2, 3];
//! let h = selvedge::spawn(move || data.len());
//! assert_eq!(h.join(), 3);
//! ```
//!
//! `Runtime::run` borrows, since it returns only once its closure did; but
//! the closure and its result cross to a worker thread, so both must be
//! `Send`.
//!
//! ```
//! let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
//! let data = vec![1, 2, 3];
//! assert_eq!(rt.run(|| data.len()), 3);
//! ```
//!
//! ```compile_fail
//! let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
//! let shared = std::rc::Rc::new(5);
//! rt.run(|| *shared);
//! ```
//!
//! ```compile_fail
//! let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
//! let _ = rt.run(|| std::rc::Rc::new(5));
//! ```
//!
//! A task's result crosses threads to its handle: it must be `Send`.
//!
//! ```compile_fail
//! let h = selvedge::spawn(|| std::rc::Rc::new(5));
//! ```
//!
//! The elements of `par_iter_mut` and `par_chunks_mut` are handed to other
//! threads: they must be `Send`.
//!
//! ```compile_fail
//! let mut v = vec![std::rc::Rc::new(1), std::rc::Rc::new(2)];
//! selvedge::par_iter_mut(&mut v).for_each(|_, x| *x = std::rc::Rc::new(0));
//! ```
//!
//! ```compile_fail
//! let mut v = vec![std::rc::Rc::new(1), std::rc::Rc::new(2)];
//! selvedge::par_chunks_mut(&mut v, 1).for_each(|_, c| c[0] = std::rc::Rc::new(0));
//! ```
//!
//! ```
//! let mut v = vec![Box::new(1), Box::new(2)];
//! selvedge::par_iter_mut(&mut v).for_each(|_, x| **x += 1);
//! selvedge::par_chunks_mut(&mut v, 1).for_each(|_, c| *c[0] += 1);
//! assert_eq!(v, [Box::new(3), Box::new(4)]);
//! ```
//!
//! A loop body runs on several threads at once: it must be `Sync`.
//!
//! ```compile_fail
//! let cell = std::cell::Cell::new(0);
//! selvedge::parallel_for(0..10).for_each(|i| cell.set(i));
//! ```
//!
//! ```
//! let total = std::sync::atomic::AtomicUsize::new(0);
//! selvedge::parallel_for(0..10).for_each(|i| {
//!     total.fetch_add(i, std::sync::atomic::Ordering::Relaxed);
//! });
//! assert_eq!(total.into_inner(), 45);
//! ```
