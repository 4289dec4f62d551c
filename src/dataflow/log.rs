//! `Log`: the ordering state of one `Data` handle, touched only while an
//! access to it is recorded (under the handle's mutex): the last write and
//! the reads since it, each as the completion the next accesses wait for.

use crate::core::registry::Registry;
use crate::dataflow::event::Dep;
use crate::dataflow::mode::Mode;
use crate::dataflow::readers::{ReadShare, Readers};
use crate::dataflow::run_record::RunRecord;
use std::any::Any;
use std::sync::{Arc, Weak};

// A handle's log and its lock fill two cache lines of the handle's
// allocation (`data.rs`'s `OwnLines`): a byte more would add a line to
// every `Data`.
static_assertions::const_assert!(size_of::<crate::core::sync::Mutex<Log>>() <= 128);

/// The ordering state of one handle: the last write and every read since.
#[derive(Default)]
pub struct Log {
    last_write: Option<Recorded>,
    /// The CPU tasks' reads of the current version, as one completion (see
    /// `readers.rs`), open to more reads: the log's part of the count, and
    /// the completion as an entry.
    readers: Option<(Readers, Recorded)>,
    /// The other reads since the last write, each with its completion:
    /// GPU tasks', graph runs', `read_now`'s, and groups of CPU reads
    /// closed before the next write (see [`Log::close_reads`]).
    reads: Vec<Recorded>,
    /// The runtime of the latest access: where a wait from outside a task
    /// (`into_inner`, `read_now`) parks its waiting task.
    pub(crate) runtime: Weak<Registry>,
}

/// One access in a handle's log (or a group of CPU reads): its completion,
/// and for a GPU task what the same device's later tasks wait for on the
/// device instead (the GPU layer's sync object: its event and when it is
/// recorded).
#[derive(Clone)]
pub(crate) struct Recorded {
    pub(crate) done: Completion,
    /// Read by GPU tasks only (feature `cuda`).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) device: Option<Arc<dyn Any + Send + Sync>>,
}

/// When a recorded access is over.
#[derive(Clone)]
pub(crate) enum Completion {
    /// Fulfilled once the access is over (for a GPU task: its work is
    /// complete on the device), or, if it never ran, once the accesses
    /// before it are (see `turn.rs`; a read that never ran just leaves its
    /// group): never broken.
    Once(Dep),
    /// The runs of a graph: the latest run's completion, in the record (see
    /// `run_record.rs`), which knows the handle by its log's address.
    Runs(Arc<RunRecord>),
}

/// An access recorded before a new one and not over: what the new one
/// waits for.
pub(crate) struct Before<'a> {
    pub(crate) done: Dep,
    /// Read by GPU tasks only (feature `cuda`).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) device: Option<&'a Arc<dyn Any + Send + Sync>>,
}

impl Recorded {
    /// A CPU task's access.
    pub(crate) fn host(done: Dep) -> Self {
        Self {
            done: Completion::Once(done),
            device: None,
        }
    }

    /// The runs of the graph whose run record is `record`.
    pub(crate) fn runs(record: Arc<RunRecord>) -> Self {
        Self {
            done: Completion::Runs(record),
            device: None,
        }
    }

    /// What an access recorded after this one waits for, if this one is
    /// not over. Looking at a graph's entry notes its handle (by `log`,
    /// the address of the log holding it) in the graph's run record.
    #[inline(always)]
    fn waited_for(&self, log: usize) -> Option<Before<'_>> {
        let done = match &self.done {
            Completion::Once(d) => {
                if d.is_fulfilled() {
                    return None;
                }
                d.clone()
            }
            Completion::Runs(record) => record.seen(log)?,
        };
        Some(Before {
            done,
            device: self.device.as_ref(),
        })
    }

    /// Whether the entry may be dropped from the log: its access is over
    /// (a graph's entry: its latest run, and the graph is told to record
    /// the handle, by `log`, again).
    fn is_over(&self, log: usize) -> bool {
        match &self.done {
            Completion::Once(d) => d.is_fulfilled(),
            Completion::Runs(record) => record.forget(log),
        }
    }

    /// Whether this is the entry of the graph whose run record is `record`.
    fn is_runs_of(&self, record: &Arc<RunRecord>) -> bool {
        matches!(&self.done, Completion::Runs(r) if Arc::ptr_eq(r, record))
    }
}

impl Log {
    /// The accesses a new access in `mode` waits for, skipping those
    /// finished already: the last write, and for a write the reads since.
    pub(crate) fn before(&self, mode: Mode) -> impl Iterator<Item = Before<'_>> {
        let at = self.address();
        self.entries_before(mode)
            .filter_map(move |r| r.waited_for(at))
    }

    /// What a new run of the graph whose run record is `record` waits for (see
    /// [`Log::before`]): its own entries skipped, which it replaces, and
    /// which would name the run itself.
    pub(crate) fn before_run<'a>(
        &'a self,
        mode: Mode,
        record: &'a Arc<RunRecord>,
    ) -> impl Iterator<Item = Before<'a>> {
        let at = self.address();
        self.entries_before(mode)
            .filter(move |r| !r.is_runs_of(record))
            .filter_map(move |r| r.waited_for(at))
    }

    /// The entries a new access in `mode` comes after: the last write, and
    /// for a write the reads since.
    #[inline(always)]
    fn entries_before(&self, mode: Mode) -> impl Iterator<Item = &Recorded> {
        let (readers, reads) = if mode.writes() {
            (self.readers.as_ref().map(|(_, r)| r), &self.reads[..])
        } else {
            (None, &[][..])
        };
        self.last_write.iter().chain(readers).chain(reads)
    }

    /// What a new read waits for: the last write, if not over
    /// ([`Log::before`] for a read, without the iterator: a read task's
    /// submission takes this).
    #[inline]
    pub(crate) fn before_read(&self) -> Option<Before<'_>> {
        let at = self.address();
        self.last_write.as_ref().and_then(|r| r.waited_for(at))
    }

    /// Records a CPU task's read: returns its share of the reads of the
    /// current version.
    pub(crate) fn record_read(&mut self) -> ReadShare {
        if self.readers.as_ref().is_some_and(|(r, _)| r.is_full()) {
            // As many reads as the count can take: later ones form
            // another group.
            self.close_reads();
        }
        let (readers, _) = self.readers.get_or_insert_with(|| {
            let readers = Readers::new();
            let done = Recorded::host(readers.dep());
            (readers, done)
        });
        readers.share()
    }

    /// Closes the current version's group of CPU reads to newcomers (later
    /// reads form another group): its completion comes once the reads in
    /// it ended, and stays in the log as one of the reads since the last
    /// write.
    pub(crate) fn close_reads(&mut self) {
        if let Some((readers, done)) = self.readers.take() {
            drop(readers);
            self.push_read(done);
        }
    }

    /// Records a new access in `mode` (for a CPU task's read,
    /// [`Log::record_read`]).
    pub(crate) fn record(&mut self, mode: Mode, access: Recorded) {
        if mode.writes() {
            self.reads.clear();
            // The log's part of the reads' count: the reads' completion
            // comes once they ended.
            self.readers = None;
            self.last_write = Some(access);
        } else if let Completion::Runs(record) = &access.done {
            // A graph registering again after something from outside
            // looked: its entry from before stands for its runs still.
            if !self.reads.iter().any(|r| r.is_runs_of(record)) {
                self.push_read(access);
            }
        } else {
            self.push_read(access);
        }
    }

    fn push_read(&mut self, access: Recorded) {
        // Drops the reads that finished, now and then, so a value read many
        // times between writes keeps a short list.
        if self.reads.len() == self.reads.capacity() && self.reads.len() >= 8 {
            let at = self.address();
            self.reads.retain(|r| !r.is_over(at));
        }
        self.reads.push(access);
    }

    /// Every access not finished yet, as dependencies; the CPU reads so far
    /// closed first (see [`Log::close_reads`]), so that their completion
    /// comes once they ended, not at the next write.
    pub(crate) fn pending(&mut self) -> Vec<Dep> {
        self.close_reads();
        self.before(Mode::Write).map(|r| r.done).collect()
    }

    /// How a graph's run record knows this log's handle: the log's address
    /// (stable: the log lives in the handle's shared allocation).
    pub(crate) fn address(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Notes `runtime` as the latest access's.
    pub(crate) fn note_runtime(&mut self, runtime: &Arc<Registry>) {
        // Compared first: a downgrade is a write to the runtime's shared
        // counts.
        if Weak::as_ptr(&self.runtime) != Arc::as_ptr(runtime) {
            self.runtime = Arc::downgrade(runtime);
        }
    }
}
